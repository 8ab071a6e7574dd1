// Command controller is the operator-sdk-style peer of kubesteer's Memcached reconciler, for the
// side-by-side benchmark (bench/scripts/controller.sh with BENCH_SUBJECT=peers): the same children
// (a Deployment and a headless Service with the same labels and owner references, applied
// server-side) and the same status (readyReplicas, nodes, observedGeneration and the Ready,
// Available, Progressing and Degraded conditions). See bench/peers/README.md for differences.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var groupVersion = schema.GroupVersion{Group: "kubesteer.io", Version: "v1alpha1"}

const (
	app          = "memcached"
	portName     = "memcached"
	memcachedUID = 11211
	fieldOwner   = "memcached-peer"
)

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

// Defaults, as kubesteer's api/src/memcached.rs states them.
func (s *MemcachedSpec) size() int32 { return ptr.Deref(s.Size, 1) }
func (s *MemcachedSpec) port() int32 { return ptr.Deref(s.Port, 11211) }
func (s *MemcachedSpec) image() string {
	return ptr.Deref(s.Image, "memcached:1.6.38-alpine")
}
func (s *MemcachedSpec) memoryMB() int32 { return ptr.Deref(s.MemoryMB, 64) }
func (s *MemcachedSpec) resources() corev1.ResourceRequirements {
	if s.Resources != nil {
		return *s.Resources
	}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}}
}

func selectorLabels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/instance": name}
}

func labels(name string) map[string]string {
	l := selectorLabels(name)
	l["app.kubernetes.io/managed-by"] = "kubesteer"
	return l
}

type MemcachedReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder record.EventRecorder
}

func (r *MemcachedReconciler) deployment(mc *Memcached) (*appsv1.Deployment, error) {
	probe := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(portName)}},
		PeriodSeconds: 10,
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: mc.Name, Namespace: mc.Namespace, Labels: labels(mc.Name)},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(mc.Spec.size()),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(mc.Name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(mc.Name)},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{
						Name:  "memcached",
						Image: mc.Spec.image(),
						Args:  []string{"-m", strconv.Itoa(int(mc.Spec.memoryMB())), "-p", strconv.Itoa(int(mc.Spec.port()))},
						Ports: []corev1.ContainerPort{{
							Name: portName, ContainerPort: mc.Spec.port(), Protocol: corev1.ProtocolTCP,
						}},
						Resources:      mc.Spec.resources(),
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
					}},
				},
			},
		},
	}
	return d, controllerutil.SetControllerReference(mc, d, r.Scheme)
}

func (r *MemcachedReconciler) service(mc *Memcached) (*corev1.Service, error) {
	s := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: mc.Name, Namespace: mc.Namespace, Labels: labels(mc.Name)},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(mc.Name),
			Ports: []corev1.ServicePort{{
				Name: portName, Port: mc.Spec.port(), TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
	return s, controllerutil.SetControllerReference(mc, s, r.Scheme)
}

func deploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mc := &Memcached{}
	if err := r.Get(ctx, req.NamespacedName, mc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	// Which children this reconcile creates, for the Created event (kubesteer records one too).
	var created []string
	for _, c := range []struct {
		kind string
		obj  client.Object
	}{{"Deployment", &appsv1.Deployment{}}, {"Service", &corev1.Service{}}} {
		if err := r.Get(ctx, req.NamespacedName, c.obj); apierrors.IsNotFound(err) {
			created = append(created, c.kind+" "+mc.Name)
		}
	}
	want, err := r.deployment(mc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Patch(ctx, want, client.Apply, client.ForceOwnership, client.FieldOwner(fieldOwner)); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Deployment: %w", err)
	}
	svc, err := r.service(mc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Patch(ctx, svc, client.Apply, client.ForceOwnership, client.FieldOwner(fieldOwner)); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Service: %w", err)
	}
	if len(created) > 0 {
		r.Recorder.Event(mc, corev1.EventTypeNormal, "Created", "created "+strings.Join(created, " and "))
	}
	// want now holds the Deployment as the apiserver returned it, status included.
	d := want

	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(mc.Namespace), client.MatchingLabels(selectorLabels(mc.Name))); err != nil {
		return ctrl.Result{}, err
	}
	nodes := []string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			nodes = append(nodes, p.Name)
		}
	}
	sort.Strings(nodes)

	size := mc.Spec.size()
	ready := d.Status.ReadyReplicas
	done := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == size &&
		d.Status.Replicas == size && ready == size
	msg := fmt.Sprintf("%d/%d pods ready", ready, size)
	progressing := deploymentCondition(d, appsv1.DeploymentProgressing)
	failure := deploymentCondition(d, appsv1.DeploymentReplicaFailure)
	deadline := progressing != nil && progressing.Status == corev1.ConditionFalse
	degraded := deadline || (failure != nil && failure.Status == corev1.ConditionTrue)
	degradedMsg := ""
	if failure != nil && failure.Status == corev1.ConditionTrue {
		degradedMsg = failure.Message
	} else if deadline {
		degradedMsg = progressing.Message
	}

	status := mc.Status.DeepCopyObjectStatus()
	set := func(t string, ok bool, reason, message string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: mc.Generation,
		})
	}
	if done {
		set("Ready", true, "AllPodsReady", msg)
	} else {
		set("Ready", false, "PodsNotReady", msg)
	}
	if a := deploymentCondition(d, appsv1.DeploymentAvailable); a != nil && a.Status == corev1.ConditionTrue {
		set("Available", true, "MinimumPodsAvailable", msg)
	} else {
		set("Available", false, "MinimumPodsUnavailable", msg)
	}
	switch {
	case degraded:
		set("Progressing", false, "RolloutStalled", degradedMsg)
		set("Degraded", true, "DeploymentFailing", degradedMsg)
	case done:
		set("Progressing", false, "RolloutComplete", fmt.Sprintf("%d pods up to date", size))
		set("Degraded", false, "AsExpected", "")
	default:
		set("Progressing", true, "RollingOut", msg)
		set("Degraded", false, "AsExpected", "")
	}
	status.Nodes = nodes
	status.ReadyReplicas = ptr.To(ready)
	status.ObservedGeneration = ptr.To(mc.Generation)
	if len(status.Nodes) == 0 {
		status.Nodes = nil
	}
	if equality.Semantic.DeepEqual(status, &mc.Status) {
		return ctrl.Result{}, nil
	}
	mc.Status = *status
	if err := r.Status().Update(ctx, mc); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// DeepCopyObjectStatus is a copy of the status to change.
func (in *MemcachedStatus) DeepCopyObjectStatus() *MemcachedStatus {
	out := new(MemcachedStatus)
	in.DeepCopyInto(out)
	return out
}

func main() {
	var probeAddr string
	var workers, burst int
	var qps float64
	flag.StringVar(&probeAddr, "metrics-addr", "127.0.0.1:8081", "address of /readyz and /healthz")
	flag.IntVar(&workers, "workers", 1, "MaxConcurrentReconciles (kubebuilder's default: 1)")
	flag.Float64Var(&qps, "qps", 20, "client QPS (controller-runtime's default: 20)")
	flag.IntVar(&burst, "burst", 30, "client burst (controller-runtime's default: 30)")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("peer-controller")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "scheme")
		os.Exit(1)
	}
	scheme.AddKnownTypes(groupVersion, &Memcached{}, &MemcachedList{})
	metav1.AddToGroupVersion(scheme, groupVersion)

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS = float32(qps)
	cfg.Burst = burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probeAddr,
	})
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	r := &MemcachedReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorderFor("memcached-peer")}
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&Memcached{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r); err != nil {
		log.Error(err, "controller")
		os.Exit(1)
	}
	_ = mgr.AddHealthzCheck("healthz", healthz.Ping)
	// Ready once the informers have synced, as kubesteer's /readyz.
	_ = mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	})
	log.Info("starting", "workers", workers, "qps", qps, "burst", burst)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
