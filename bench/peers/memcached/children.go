package memcached

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const (
	app = "memcached"
	// PortName names the container port and the Service's target port.
	PortName = "memcached"
	// ContainerName is the Deployment's one container.
	ContainerName = "memcached"
	memcachedUID  = 11211
)

// Defaults, as kubesteer's api/src/memcached.rs states them.

func (s *MemcachedSpec) EffectiveSize() int32 { return ptr.Deref(s.Size, 1) }
func (s *MemcachedSpec) EffectivePort() int32 { return ptr.Deref(s.Port, 11211) }
func (s *MemcachedSpec) EffectiveImage() string {
	return ptr.Deref(s.Image, "memcached:1.6.38-alpine")
}
func (s *MemcachedSpec) EffectiveMemoryMB() int32 { return ptr.Deref(s.MemoryMB, 64) }
func (s *MemcachedSpec) EffectiveResources() corev1.ResourceRequirements {
	if s.Resources != nil {
		return *s.Resources
	}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}}
}

// Args are the container's arguments: memory and port.
func (s *MemcachedSpec) Args() []string {
	return []string{"-m", strconv.Itoa(int(s.EffectiveMemoryMB())), "-p", strconv.Itoa(int(s.EffectivePort()))}
}

// ContainerPorts are the container's ports.
func (s *MemcachedSpec) ContainerPorts() []corev1.ContainerPort {
	return []corev1.ContainerPort{{Name: PortName, ContainerPort: s.EffectivePort(), Protocol: corev1.ProtocolTCP}}
}

// ServicePorts are the Service's ports.
func (s *MemcachedSpec) ServicePorts() []corev1.ServicePort {
	return []corev1.ServicePort{{
		Name: PortName, Port: s.EffectivePort(), TargetPort: intstr.FromString(PortName), Protocol: corev1.ProtocolTCP,
	}}
}

// SelectorLabels select a Memcached's pods.
func SelectorLabels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/instance": name}
}

// Labels of the children and the pods.
func Labels(name string) map[string]string {
	l := SelectorLabels(name)
	l["app.kubernetes.io/managed-by"] = "kubesteer"
	return l
}

// Container is the desired memcached container.
func (s *MemcachedSpec) Container() corev1.Container {
	probe := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(PortName)}},
		PeriodSeconds: 10,
	}
	return corev1.Container{
		Name:           ContainerName,
		Image:          s.EffectiveImage(),
		Args:           s.Args(),
		Ports:          s.ContainerPorts(),
		Resources:      s.EffectiveResources(),
		LivenessProbe:  probe,
		ReadinessProbe: probe,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](memcachedUID),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// Deployment is the desired Deployment of mc, with mc as its controller owner.
func Deployment(mc *Memcached, scheme *runtime.Scheme) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: mc.Name, Namespace: mc.Namespace, Labels: Labels(mc.Name)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(mc.Spec.EffectiveSize()),
			Selector: &metav1.LabelSelector{MatchLabels: SelectorLabels(mc.Name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: Labels(mc.Name)},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					Containers:                   []corev1.Container{mc.Spec.Container()},
				},
			},
		},
	}
	return d, controllerutil.SetControllerReference(mc, d, scheme)
}

// Service is the desired headless Service of mc, with mc as its controller owner.
func Service(mc *Memcached, scheme *runtime.Scheme) (*corev1.Service, error) {
	s := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: mc.Name, Namespace: mc.Namespace, Labels: Labels(mc.Name)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  SelectorLabels(mc.Name),
			Ports:     mc.Spec.ServicePorts(),
		},
	}
	return s, controllerutil.SetControllerReference(mc, s, scheme)
}
