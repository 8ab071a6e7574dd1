// Package memcached is what both Go Memcached peers share (bench/peers/controller, which
// applies its children on every reconcile, and bench/peers/tutorial, in the kubebuilder
// tutorial's Get, Create, Update pattern): the API types as controller-gen would write them, the
// spec defaults, the labels, the desired Deployment and Service, the status computed from the
// Deployment and its pods, and the manager with its flags and readiness. See
// bench/peers/README.md.
package memcached

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// GroupVersion of kubesteer's Memcached.
var GroupVersion = schema.GroupVersion{Group: "kubesteer.io", Version: "v1alpha1"}

// AddToScheme registers Memcached and MemcachedList.
func AddToScheme(scheme *runtime.Scheme) {
	scheme.AddKnownTypes(GroupVersion, &Memcached{}, &MemcachedList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
}

type MemcachedSpec struct {
	Size      *int32                       `json:"size,omitempty"`
	Port      *int32                       `json:"port,omitempty"`
	Image     *string                      `json:"image,omitempty"`
	MemoryMB  *int32                       `json:"memoryMB,omitempty"`
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

type MemcachedStatus struct {
	Nodes              []string           `json:"nodes,omitempty"`
	ReadyReplicas      *int32             `json:"readyReplicas,omitempty"`
	ObservedGeneration *int64             `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

type Memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MemcachedSpec   `json:"spec,omitempty"`
	Status            MemcachedStatus `json:"status,omitempty"`
}

type MemcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Memcached `json:"items"`
}

// DeepCopy functions as controller-gen would write them.

func (in *MemcachedSpec) DeepCopyInto(out *MemcachedSpec) {
	*out = *in
	if in.Size != nil {
		out.Size = ptr.To(*in.Size)
	}
	if in.Port != nil {
		out.Port = ptr.To(*in.Port)
	}
	if in.Image != nil {
		out.Image = ptr.To(*in.Image)
	}
	if in.MemoryMB != nil {
		out.MemoryMB = ptr.To(*in.MemoryMB)
	}
	if in.Resources != nil {
		out.Resources = in.Resources.DeepCopy()
	}
}

func (in *MemcachedStatus) DeepCopyInto(out *MemcachedStatus) {
	*out = *in
	if in.Nodes != nil {
		out.Nodes = append([]string(nil), in.Nodes...)
	}
	if in.ReadyReplicas != nil {
		out.ReadyReplicas = ptr.To(*in.ReadyReplicas)
	}
	if in.ObservedGeneration != nil {
		out.ObservedGeneration = ptr.To(*in.ObservedGeneration)
	}
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopy is a copy of the status to change.
func (in *MemcachedStatus) DeepCopy() *MemcachedStatus {
	out := new(MemcachedStatus)
	in.DeepCopyInto(out)
	return out
}

func (in *Memcached) DeepCopyInto(out *Memcached) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

func (in *Memcached) DeepCopyObject() runtime.Object {
	out := new(Memcached)
	in.DeepCopyInto(out)
	return out
}

func (in *MemcachedList) DeepCopyObject() runtime.Object {
	out := new(MemcachedList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Memcached, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
