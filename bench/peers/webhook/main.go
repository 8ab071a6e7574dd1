// Command webhook is the controller-runtime peer of kubesteer's admission webhook, for the
// side-by-side benchmark (hack/bench-webhook.sh with BENCH_SUBJECT=peers). It serves the same
// endpoints (/mutate/<plural>, /validate/<plural>, /readyz) with the same rules and defaults,
// in the style of a kubebuilder project: a manager, its webhook server, admission handlers,
// a cached client for cluster facts and SubjectAccessReviews for permission checks.
// See bench/peers/README.md for where it differs from kubesteer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const group = "kubesteer.io"

var scalerGVK = schema.GroupVersionKind{Group: group, Version: "v1alpha1", Kind: "ScalerList"}

// permissionTTL is how long a granted permission is remembered, as kubesteer's webhook does.
const permissionTTL = 10 * time.Second

type kind struct {
	name     string
	plural   string
	validate func(raw []byte) ([]string, field.ErrorList, error)
	defaults func(spec map[string]any, namespace string)
}

func typed[T interface {
	Validate() ([]string, field.ErrorList)
}](raw []byte, spec T) ([]string, field.ErrorList, error) {
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, nil, err
	}
	if len(obj.Spec) == 0 {
		return nil, field.ErrorList{field.Required(field.NewPath("spec"), "")}, nil
	}
	if err := json.Unmarshal(obj.Spec, spec); err != nil {
		return nil, nil, err
	}
	w, errs := spec.Validate()
	return w, errs, nil
}

var kinds = []kind{
	{"Memcached", "memcacheds", func(raw []byte) ([]string, field.ErrorList, error) { return typed(raw, &MemcachedSpec{}) }, defaultMemcached},
	{"Welcome", "welcomes", func(raw []byte) ([]string, field.ErrorList, error) { return typed(raw, &WelcomeSpec{}) }, defaultWelcome},
	{"Scaler", "scalers", func(raw []byte) ([]string, field.ErrorList, error) { return typed(raw, &ScalerSpec{}) }, defaultScaler},
}

// permissions remembers granted SubjectAccessReviews for permissionTTL.
type permissions struct {
	mu      sync.Mutex
	granted map[string]time.Time
}

func (p *permissions) check(ctx context.Context, c client.Client, user authenticationUser, attrs authorizationv1.ResourceAttributes) (bool, error) {
	key := fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s", user.Username, attrs.Verb, attrs.Group, attrs.Resource, attrs.Subresource, attrs.Namespace, attrs.Name)
	p.mu.Lock()
	if at, ok := p.granted[key]; ok && time.Since(at) < permissionTTL {
		p.mu.Unlock()
		return true, nil
	}
	p.mu.Unlock()
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra, ResourceAttributes: &attrs,
	}}
	if err := c.Create(ctx, sar); err != nil {
		return false, err
	}
	if sar.Status.Allowed {
		p.mu.Lock()
		p.granted[key] = time.Now()
		p.mu.Unlock()
	}
	return sar.Status.Allowed, nil
}

type authenticationUser struct {
	Username string
	UID      string
	Groups   []string
	Extra    map[string][]string
}

type handler struct {
	kind   kind
	mutate bool
	client client.Client
	perms  *permissions
}

func denied(kindName, name string, errs field.ErrorList) admission.Response {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	body := msgs[0]
	if len(msgs) > 1 {
		body = "[" + strings.Join(msgs, ", ") + "]"
	}
	// The apiserver's format, as kubesteer's api/src/field.rs summarize() writes it.
	r := admission.Denied(fmt.Sprintf("%s.%s %q is invalid: %s", kindName, group, name, body))
	r.Result.Code = http.StatusUnprocessableEntity
	r.Result.Reason = metav1.StatusReasonInvalid
	return r
}

func (h *handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != group || req.Kind.Kind != h.kind.name {
		return admission.Denied(fmt.Sprintf("this endpoint admits %s.%s, not %s/%s", h.kind.name, group, req.Kind.Group, req.Kind.Kind))
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	if len(req.Object.Raw) == 0 {
		return admission.Denied("the review carries no object")
	}
	namespace := req.Namespace
	name := req.Name
	if h.mutate {
		var obj map[string]any
		if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if meta, ok := obj["metadata"].(map[string]any); ok && meta["deletionTimestamp"] != nil {
			return admission.Allowed("")
		}
		spec, ok := obj["spec"].(map[string]any)
		if !ok {
			return denied(h.kind.name, name, field.ErrorList{field.Required(field.NewPath("spec"), "")})
		}
		h.kind.defaults(spec, namespace)
		mutated, err := json.Marshal(obj)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		return admission.PatchResponseFromRaw(req.Object.Raw, mutated)
	}
	warnings, errs, err := h.kind.validate(req.Object.Raw)
	if err != nil {
		return denied(h.kind.name, name, field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())})
	}
	if len(errs) == 0 {
		user := authenticationUser{Username: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups}
		if len(req.UserInfo.Extra) > 0 {
			user.Extra = map[string][]string{}
			for k, v := range req.UserInfo.Extra {
				user.Extra[k] = v
			}
		}
		switch h.kind.name {
		case "Scaler":
			var more []string
			more, errs = h.scalerRules(ctx, req, user, namespace, name)
			warnings = append(warnings, more...)
		case "Welcome":
			errs = h.welcomeRules(ctx, req, user, namespace)
		}
	}
	if len(errs) > 0 {
		return denied(h.kind.name, name, errs)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

func (h *handler) permitted(ctx context.Context, user authenticationUser, path *field.Path, attrs authorizationv1.ResourceAttributes) *field.Error {
	ok, err := h.perms.check(ctx, h.client, user, attrs)
	desc := fmt.Sprintf("%s %s/%s (%s) %q in namespace %q", attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Group, attrs.Name, attrs.Namespace)
	switch {
	case err != nil:
		return field.Forbidden(path, fmt.Sprintf("could not check whether user %q may %s: %v", user.Username, desc, err))
	case !ok:
		return field.Forbidden(path, fmt.Sprintf("user %q may not %s", user.Username, desc))
	}
	return nil
}

func (h *handler) scalerRules(ctx context.Context, req admission.Request, user authenticationUser, namespace, name string) ([]string, field.ErrorList) {
	var obj struct {
		Spec ScalerSpec `json:"spec"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return nil, nil
	}
	var errs field.ErrorList
	var warnings []string
	scalers := &unstructured.UnstructuredList{}
	scalers.SetGroupVersionKind(scalerGVK)
	if err := h.client.List(ctx, scalers); err != nil {
		return nil, field.ErrorList{field.InternalError(field.NewPath("spec", "deployments"), err)}
	}
	for i, t := range obj.Spec.Deployments {
		path := field.NewPath("spec", "deployments").Index(i)
		ns := namespace
		if t.Namespace != nil {
			ns = *t.Namespace
		}
		if e := h.permitted(ctx, user, path, authorizationv1.ResourceAttributes{
			Verb: "update", Group: "apps", Resource: "deployments", Subresource: "scale", Namespace: ns, Name: t.Name,
		}); e != nil {
			errs = append(errs, e)
			continue
		}
		if other := claimant(scalers, ns, t.Name, namespace, name); other != "" {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("Deployment %s/%s is already scaled by Scaler %s", ns, t.Name, other)))
		}
		d := &metav1.PartialObjectMetadata{}
		d.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
		if err := h.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: t.Name}, d); err != nil {
			if client.IgnoreNotFound(err) == nil {
				warnings = append(warnings, fmt.Sprintf("%s: Deployment %s/%s does not exist yet; it is scaled once it appears", path, ns, t.Name))
			}
		}
		hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
		if err := h.client.List(ctx, hpas, client.InNamespace(ns)); err == nil {
			for _, hpa := range hpas.Items {
				if hpa.Spec.ScaleTargetRef.Kind == "Deployment" && hpa.Spec.ScaleTargetRef.Name == t.Name {
					warnings = append(warnings, fmt.Sprintf("%s: Deployment %s/%s is also scaled by HorizontalPodAutoscaler %s; they will fight over replicas", path, ns, t.Name, hpa.Name))
					break
				}
			}
		}
	}
	return warnings, errs
}

// claimant is another Scaler that already scales namespace/name.
func claimant(scalers *unstructured.UnstructuredList, ns, name, myNs, myName string) string {
	for _, s := range scalers.Items {
		if s.GetNamespace() == myNs && s.GetName() == myName {
			continue
		}
		deps, _, _ := unstructured.NestedSlice(s.Object, "spec", "deployments")
		for _, d := range deps {
			m, ok := d.(map[string]any)
			if !ok {
				continue
			}
			tns, _ := m["namespace"].(string)
			if tns == "" {
				tns = s.GetNamespace()
			}
			if tns == ns && m["name"] == name {
				return s.GetNamespace() + "/" + s.GetName()
			}
		}
	}
	return ""
}

func (h *handler) welcomeRules(ctx context.Context, req admission.Request, user authenticationUser, namespace string) field.ErrorList {
	var obj, old struct {
		Spec WelcomeSpec `json:"spec"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil || obj.Spec.PasswordSecretRef == nil {
		return nil
	}
	if len(req.OldObject.Raw) > 0 && json.Unmarshal(req.OldObject.Raw, &old) == nil &&
		old.Spec.PasswordSecretRef != nil && old.Spec.PasswordSecretRef.Name == obj.Spec.PasswordSecretRef.Name {
		return nil
	}
	if e := h.permitted(ctx, user, field.NewPath("spec", "passwordSecretRef", "name"), authorizationv1.ResourceAttributes{
		Verb: "get", Resource: "secrets", Namespace: namespace, Name: obj.Spec.PasswordSecretRef.Name,
	}); e != nil {
		return field.ErrorList{e}
	}
	return nil
}

func main() {
	var addr, certFile, keyFile string
	flag.StringVar(&addr, "addr", "127.0.0.1:9443", "address to serve on")
	flag.StringVar(&certFile, "tls-cert-file", "tls.crt", "serving certificate (PEM)")
	flag.StringVar(&keyFile, "tls-key-file", "tls.key", "serving key (PEM)")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("peer-webhook")

	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		log.Error(err, "bad --addr")
		os.Exit(2)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		log.Error(err, "bad --addr port")
		os.Exit(2)
	}
	if filepath.Dir(certFile) != filepath.Dir(keyFile) {
		log.Error(nil, "--tls-cert-file and --tls-key-file must be in one directory (controller-runtime's CertDir)")
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "scheme")
		os.Exit(1)
	}
	server := webhook.NewServer(webhook.Options{
		Host: host, Port: port,
		CertDir: filepath.Dir(certFile), CertName: filepath.Base(certFile), KeyName: filepath.Base(keyFile),
	})
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          server,
		// Cluster facts come from informers, as in kubesteer: a review never LISTs the apiserver.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	// The manager runs its webhook server only once asked for it.
	server = mgr.GetWebhookServer()
	perms := &permissions{granted: map[string]time.Time{}}
	for _, k := range kinds {
		for _, mutate := range []bool{true, false} {
			path := "/validate/" + k.plural
			if mutate {
				path = "/mutate/" + k.plural
			}
			server.Register(path, &webhook.Admission{Handler: &handler{kind: k, mutate: mutate, client: mgr.GetClient(), perms: perms}})
		}
	}
	// Ready once the informers behind the cluster facts have listed.
	var ready atomic.Bool
	server.Register("/readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	ctx := ctrl.SetupSignalHandler()
	// Start the informers the handlers read (a Get/List through the cached client starts them).
	go func() {
		c := mgr.GetCache()
		scalers := &unstructured.UnstructuredList{}
		scalers.SetGroupVersionKind(scalerGVK)
		d := &metav1.PartialObjectMetadataList{}
		d.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("DeploymentList"))
		for _, l := range []client.ObjectList{scalers, d, &autoscalingv2.HorizontalPodAutoscalerList{}} {
			for c.List(ctx, l) != nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}
		ready.Store(true)
		log.Info("ready")
	}()
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
