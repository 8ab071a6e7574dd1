// Command webhook is the controller-runtime peer of kubesteer's admission webhook, for the
// side-by-side benchmark (bench/scripts/webhook.sh with BENCH_SUBJECT=peers). It serves the same
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const group = "kubesteer.io"

var scalerGVK = schema.GroupVersionKind{Group: group, Version: "v1beta1", Kind: "ScalerList"}

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
	mapper *scaleMapper
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
	resource := attrs.Resource
	if attrs.Subresource != "" {
		resource += "/" + attrs.Subresource
	}
	desc := attrs.Verb + " " + resource
	if attrs.Group != "" {
		desc += " (" + attrs.Group + ")"
	}
	if attrs.Name != "" {
		desc += fmt.Sprintf(" %q", attrs.Name)
	}
	desc += fmt.Sprintf(" in namespace %q", attrs.Namespace)
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
	spec := &obj.Spec
	refs := field.NewPath("spec", "scaleTargetRefs")
	var errs field.ErrorList
	// Two entries naming the same object once their namespaces are resolved.
	seen := map[[4]string]bool{}
	for i, t := range spec.ScaleTargetRefs {
		key := [4]string{t.group(), t.Kind, t.namespaceOr(namespace), t.Name}
		if seen[key] {
			errs = append(errs, field.Duplicate(refs.Index(i), t))
		}
		seen[key] = true
	}
	if len(errs) > 0 {
		return nil, errs
	}
	// Each target's kind through discovery: one the cluster cannot scale is denied here.
	resources := make([]string, len(spec.ScaleTargetRefs))
	for i, t := range spec.ScaleTargetRefs {
		path := refs.Index(i).Child("kind")
		resource, why, err := h.mapper.resolve(t.APIVersion, t.Kind)
		switch {
		case err != nil:
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("could not look the kind up in the cluster's discovery, try again: %v", err)))
		case why != "":
			errs = append(errs, field.Invalid(path, t.Kind, why))
		default:
			resources[i] = resource
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	cooperate := spec.cooperates()
	refused := map[int]bool{}
	asked := map[string]bool{}
	for i, t := range spec.ScaleTargetRefs {
		ns := t.namespaceOr(namespace)
		if e := h.permitted(ctx, user, refs.Index(i), authorizationv1.ResourceAttributes{
			Verb: "update", Group: t.group(), Resource: resources[i], Subresource: "scale", Namespace: ns, Name: t.Name,
		}); e != nil {
			errs = append(errs, e)
			refused[i] = true
		}
		if cooperate && !asked[ns] {
			asked[ns] = true
			if e := h.permitted(ctx, user, refs.Index(i), authorizationv1.ResourceAttributes{
				Verb: "update", Group: "autoscaling", Resource: "horizontalpodautoscalers", Namespace: ns,
			}); e != nil {
				errs = append(errs, e)
				refused[i] = true
			}
		}
	}
	scalers := &unstructured.UnstructuredList{}
	scalers.SetGroupVersionKind(scalerGVK)
	if err := h.client.List(ctx, scalers); err != nil {
		return nil, field.ErrorList{field.InternalError(refs, err)}
	}
	var warnings []string
	for i, t := range spec.ScaleTargetRefs {
		if refused[i] {
			continue
		}
		path := refs.Index(i)
		ns := t.namespaceOr(namespace)
		target := fmt.Sprintf("%s %s/%s", t.Kind, ns, t.Name)
		if other := claimant(scalers, t, ns, namespace, name); other != "" {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("%s is already scaled by Scaler %s", target, other)))
		}
		if t.group() == "apps" && t.Kind == "Deployment" {
			d := &metav1.PartialObjectMetadata{}
			d.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
			if err := h.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: t.Name}, d); client.IgnoreNotFound(err) == nil && err != nil {
				warnings = append(warnings, fmt.Sprintf("%s: %s does not exist yet; it is scaled once it appears", path, target))
			}
		}
		hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
		if err := h.client.List(ctx, hpas, client.InNamespace(ns)); err == nil {
			for _, hpa := range hpas.Items {
				ref := hpa.Spec.ScaleTargetRef
				refGroup, _, _ := strings.Cut(ref.APIVersion, "/")
				if !strings.Contains(ref.APIVersion, "/") {
					refGroup = ""
				}
				if ref.Kind != t.Kind || ref.Name != t.Name || refGroup != t.group() {
					continue
				}
				if cooperate {
					warnings = append(warnings, fmt.Sprintf("%s: %s is scaled by HorizontalPodAutoscaler %s; the Scaler sets that HPA's minReplicas (recording and restoring the original) instead of the replicas", path, target, hpa.Name))
				} else {
					warnings = append(warnings, fmt.Sprintf("%s: %s is also scaled by HorizontalPodAutoscaler %s; with hpaCooperation Disabled they will fight over replicas", path, target, hpa.Name))
				}
				break
			}
		}
	}
	return warnings, errs
}

// claimant is another Scaler that already scales t (group, kind, namespace ns, name).
func claimant(scalers *unstructured.UnstructuredList, t ScaleTargetRef, ns, myNs, myName string) string {
	for _, s := range scalers.Items {
		if s.GetNamespace() == myNs && s.GetName() == myName {
			continue
		}
		refs, _, _ := unstructured.NestedSlice(s.Object, "spec", "scaleTargetRefs")
		for _, r := range refs {
			m, ok := r.(map[string]any)
			if !ok {
				continue
			}
			other := ScaleTargetRef{}
			other.APIVersion, _ = m["apiVersion"].(string)
			other.Kind, _ = m["kind"].(string)
			other.Name, _ = m["name"].(string)
			tns, _ := m["namespace"].(string)
			if tns == "" {
				tns = s.GetNamespace()
			}
			if tns == ns && other.Name == t.Name && other.Kind == t.Kind && other.group() == t.group() {
				return s.GetNamespace() + "/" + s.GetName()
			}
		}
	}
	return ""
}

// scaleMapper resolves a target's kind to its resource through discovery, as kubesteer's
// RESTMapper does: a mapping cached 10 minutes, a refusal 30 seconds.
type scaleMapper struct {
	discovery discovery.DiscoveryInterface
	mu        sync.Mutex
	cache     map[[2]string]mapping
}

type mapping struct {
	resource, why string
	at            time.Time
}

func (m *scaleMapper) resolve(apiVersion, kind string) (resource, why string, err error) {
	key := [2]string{apiVersion, kind}
	m.mu.Lock()
	c, ok := m.cache[key]
	m.mu.Unlock()
	ttl := 10 * time.Minute
	if c.why != "" {
		ttl = 30 * time.Second
	}
	if ok && time.Since(c.at) < ttl {
		return c.resource, c.why, nil
	}
	list, err := m.discovery.ServerResourcesForGroupVersion(apiVersion)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", "", err
	}
	c = mapping{why: fmt.Sprintf("the cluster serves no kind %q in %q", kind, apiVersion), at: time.Now()}
	if list != nil {
		for _, r := range list.APIResources {
			if r.Kind != kind || strings.Contains(r.Name, "/") {
				continue
			}
			c.why = ""
			switch {
			case !r.Namespaced:
				c.why = fmt.Sprintf("%s (%s) is cluster-scoped; a Scaler scales namespaced workloads", kind, apiVersion)
			case !hasSubresource(list.APIResources, r.Name+"/scale"):
				c.why = fmt.Sprintf("%s (%s) has no /scale subresource, so it cannot be scaled", kind, apiVersion)
			default:
				c.resource = r.Name
			}
			break
		}
	}
	m.mu.Lock()
	m.cache[key] = c
	m.mu.Unlock()
	return c.resource, c.why, nil
}

func hasSubresource(list []metav1.APIResource, name string) bool {
	for _, r := range list {
		if r.Name == name {
			return true
		}
	}
	return false
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
	disco, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		log.Error(err, "discovery")
		os.Exit(1)
	}
	mapper := &scaleMapper{discovery: disco, cache: map[[2]string]mapping{}}
	for _, k := range kinds {
		for _, mutate := range []bool{true, false} {
			path := "/validate/" + k.plural
			if mutate {
				path = "/mutate/" + k.plural
			}
			server.Register(path, &webhook.Admission{Handler: &handler{kind: k, mutate: mutate, client: mgr.GetClient(), perms: perms, mapper: mapper}})
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
