// Command controller is the operator-sdk-style peer of kubesteer's Memcached reconciler, for the
// side-by-side benchmark (bench/scripts/controller.sh with BENCH_SUBJECT=peers): the same children
// (a Deployment and a headless Service with the same labels and owner references, applied
// server-side on every reconcile) and the same status (readyReplicas, nodes, observedGeneration
// and the Ready, Available, Progressing and Degraded conditions). What it shares with the
// tutorial peer is in bench/peers/memcached. See bench/peers/README.md for differences.
package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubesteer/kubesteer/bench/peers/memcached"
)

const fieldOwner = "memcached-peer"

type MemcachedReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder record.EventRecorder
}

func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mc := &memcached.Memcached{}
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
	want, err := memcached.Deployment(mc, r.Scheme)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Patch(ctx, want, client.Apply, client.ForceOwnership, client.FieldOwner(fieldOwner)); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Deployment: %w", err)
	}
	svc, err := memcached.Service(mc, r.Scheme)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Patch(ctx, svc, client.Apply, client.ForceOwnership, client.FieldOwner(fieldOwner)); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Service: %w", err)
	}
	memcached.RecordCreated(r.Recorder, mc, created)
	// want now holds the Deployment as the apiserver returned it, status included.
	status, err := memcached.Status(ctx, r, mc, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	return memcached.UpdateStatus(ctx, r.Client, mc, status)
}

func main() {
	memcached.Run("peer-controller", func(mgr ctrl.Manager) reconcile.Reconciler {
		return &MemcachedReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorderFor("memcached-peer")}
	})
}
