package memcached

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func deploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// Status is the status mc should have with Deployment d: readyReplicas, the sorted names of
// its pods (listed from c, the manager's cache), observedGeneration and the conditions Ready,
// Available, Progressing and Degraded with kubesteer's reasons and messages
// (controller/src/reconcilers/memcached.rs). meta.SetStatusCondition keeps lastTransitionTime.
func Status(ctx context.Context, c client.Reader, mc *Memcached, d *appsv1.Deployment) (*MemcachedStatus, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(mc.Namespace), client.MatchingLabels(SelectorLabels(mc.Name))); err != nil {
		return nil, err
	}
	nodes := []string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			nodes = append(nodes, p.Name)
		}
	}
	sort.Strings(nodes)

	size := mc.Spec.EffectiveSize()
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

	status := mc.Status.DeepCopy()
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
	return status, nil
}

// UpdateStatus writes status with Status().Update only when it differs from mc's
// (equality.Semantic.DeepEqual), and asks for a requeue on a Conflict.
func UpdateStatus(ctx context.Context, c client.Client, mc *Memcached, status *MemcachedStatus) (ctrl.Result, error) {
	if equality.Semantic.DeepEqual(status, &mc.Status) {
		return ctrl.Result{}, nil
	}
	mc.Status = *status
	if err := c.Status().Update(ctx, mc); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// RecordCreated records the Normal event "Created" that kubesteer records when a reconcile
// creates children ("created Deployment x and Service x"); nothing when created is empty.
func RecordCreated(r record.EventRecorder, mc *Memcached, created []string) {
	if len(created) > 0 {
		r.Event(mc, corev1.EventTypeNormal, "Created", "created "+strings.Join(created, " and "))
	}
}
