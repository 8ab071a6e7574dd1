// Command tutorial is the Memcached peer written in the kubebuilder tutorial's pattern, for the
// side-by-side benchmark (bench/scripts/controller.sh with BENCH_SUBJECT=peers, subject
// go-tutorial): Get the Memcached and its children from the cache, Create a child that is
// missing, Update one that drifted on a field the tutorial checks, and write the status with
// Status().Update when it changed. Children, status and event are those of the apply peer
// (bench/peers/controller) and kubesteer; what they share is in bench/peers/memcached. See
// bench/peers/README.md for where it differs.
package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubesteer/kubesteer/bench/peers/memcached"
)

type MemcachedReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder record.EventRecorder
}

// requeueOn turns the errors of a stale cache (a Conflict on Update, AlreadyExists on Create)
// into a requeue, as the tutorial does for a Conflict; other errors go to the backoff.
func requeueOn(err error, what string) (ctrl.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return ctrl.Result{Requeue: true}, nil
	}
	return ctrl.Result{}, fmt.Errorf("%s: %w", what, err)
}

func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mc := &memcached.Memcached{}
	if err := r.Get(ctx, req.NamespacedName, mc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var created []string

	d := &appsv1.Deployment{}
	err := r.Get(ctx, req.NamespacedName, d)
	switch {
	case apierrors.IsNotFound(err):
		if d, err = memcached.Deployment(mc, r.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, d); err != nil {
			return requeueOn(err, "creating Deployment")
		}
		created = append(created, "Deployment "+mc.Name)
	case err != nil:
		return ctrl.Result{}, err
	case deploymentDrifted(d, mc):
		if err := r.Update(ctx, d); err != nil {
			return requeueOn(err, "updating Deployment")
		}
	}

	svc := &corev1.Service{}
	err = r.Get(ctx, req.NamespacedName, svc)
	switch {
	case apierrors.IsNotFound(err):
		if svc, err = memcached.Service(mc, r.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, svc); err != nil {
			return requeueOn(err, "creating Service")
		}
		created = append(created, "Service "+mc.Name)
	case err != nil:
		return ctrl.Result{}, err
	case serviceDrifted(svc, mc):
		if err := r.Update(ctx, svc); err != nil {
			return requeueOn(err, "updating Service")
		}
	}
	memcached.RecordCreated(r.Recorder, mc, created)

	status, err := memcached.Status(ctx, r, mc, d)
	if err != nil {
		return ctrl.Result{}, err
	}
	return memcached.UpdateStatus(ctx, r.Client, mc, status)
}

// deploymentDrifted reports whether d differs from mc's spec in what the tutorial checks (the
// replicas, and the container's image, arguments and port; never the whole object, which the
// apiserver's defaults would make differ every time) and, if so, sets those fields in d.
func deploymentDrifted(d *appsv1.Deployment, mc *memcached.Memcached) bool {
	drifted := false
	if size := mc.Spec.EffectiveSize(); ptr.Deref(d.Spec.Replicas, 1) != size {
		d.Spec.Replicas = ptr.To(size)
		drifted = true
	}
	containers := d.Spec.Template.Spec.Containers
	i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == memcached.ContainerName })
	if i < 0 {
		d.Spec.Template.Spec.Containers = append(containers, mc.Spec.Container())
		return true
	}
	c := &containers[i]
	if image := mc.Spec.EffectiveImage(); c.Image != image {
		c.Image = image
		drifted = true
	}
	if args := mc.Spec.Args(); !slices.Equal(c.Args, args) {
		c.Args = args
		drifted = true
	}
	if port := mc.Spec.EffectivePort(); len(c.Ports) != 1 || c.Ports[0].ContainerPort != port || c.Ports[0].Name != memcached.PortName {
		c.Ports = mc.Spec.ContainerPorts()
		drifted = true
	}
	return drifted
}

// serviceDrifted reports whether svc's port or selector differ from mc's and, if so, sets them.
func serviceDrifted(svc *corev1.Service, mc *memcached.Memcached) bool {
	drifted := false
	want := mc.Spec.ServicePorts()
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != want[0].Port || svc.Spec.Ports[0].TargetPort != want[0].TargetPort {
		svc.Spec.Ports = want
		drifted = true
	}
	if selector := memcached.SelectorLabels(mc.Name); !maps.Equal(svc.Spec.Selector, selector) {
		svc.Spec.Selector = selector
		drifted = true
	}
	return drifted
}

func main() {
	memcached.Run("peer-tutorial", func(mgr ctrl.Manager) reconcile.Reconciler {
		return &MemcachedReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorderFor("memcached-peer")}
	})
}
