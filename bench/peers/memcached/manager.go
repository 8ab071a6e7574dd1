package memcached

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Run parses the peers' flags (--metrics-addr, --workers, --qps, --burst and zap's), starts a
// manager with a Memcached controller owning Deployments and Services, reconciled by what
// newReconciler returns, and serves /readyz and /healthz on --metrics-addr. It returns only
// when the manager stops, and exits the process on an error.
func Run(name string, newReconciler func(mgr ctrl.Manager) reconcile.Reconciler) {
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
	log := ctrl.Log.WithName(name)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "scheme")
		os.Exit(1)
	}
	AddToScheme(scheme)

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
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&Memcached{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(newReconciler(mgr)); err != nil {
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
