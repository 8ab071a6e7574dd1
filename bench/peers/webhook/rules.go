package main

// The field rules of kubesteer's api/src/rules.rs, memcached.rs, welcome.rs and scaler.rs,
// written the way a kubebuilder project would write them: typed specs, a field.ErrorList,
// regexps compiled once at package init.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	minReplicas  = 0
	maxInt32     = 2147483647
	minPort      = 1
	maxPort      = 65535
	maxLabel     = 63
	maxSubdomain = 253
	maxImage     = 512

	memcachedMaxSize     = 100
	memcachedMinMemoryMB = 1
	memcachedMaxMemoryMB = 65536

	welcomeMinName     = 1
	welcomeMaxName     = 63
	welcomeMinUserID   = 1
	welcomeMaxUserID   = 65535
	welcomeMaxGroups   = 32
	welcomeMinGroup    = 1
	welcomeMaxGroup    = 63
	welcomeMaxEmail    = 254
	welcomeMinPassword = 1
	welcomeMaxPassword = 1024
	welcomeMaxReplicas = 100

	scalerMinTargets  = 1
	scalerMaxTargets  = 50
	scalerMinJobs     = 1
	scalerMaxJobs     = 20
	scalerMinDays     = 1
	scalerMaxDays     = 7
	scalerMaxJobName  = 63
	scalerMaxSchedule = 128
	scalerMaxTimeZone = 64
	scalerMaxHour     = 23
	// A window's end may be the end of its day: 24 or "24:00".
	scalerEndOfDayHour = 24

	scalerMinWindows      = 1
	scalerMaxWindows      = 20
	scalerMaxExcludeDates = 100
	scalerMaxExcludeDate  = 22
	scalerMaxAPIVersion   = 317
	scalerMaxKind         = 63
)

type pattern struct {
	re      *regexp.Regexp
	message string
}

func newPattern(expr, message string) pattern {
	return pattern{re: regexp.MustCompile(expr), message: message}
}

var (
	dns1123Label = newPattern(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`,
		"a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character")
	dns1123Subdomain = newPattern(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`,
		"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
	secretKey = newPattern(`^[-._a-zA-Z0-9]+$`,
		"a valid config key must consist of alphanumeric characters, '-', '_' or '.'")
	image = newPattern(`^[^[:space:][:cntrl:]]+$`,
		"must be a container image reference without whitespace")
	quantity = newPattern(`^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`,
		"must match the regular expression of a quantity, such as 250m or 64Mi")
	clock = newPattern(`^([01][0-9]|2[0-3]):[0-5][0-9]$`, `must be an hour 0-23 or "HH:MM"`)
	// What a bad window end is told.
	endClockMessage = `must be an hour 0-24 or "HH:MM" ("24:00": the end of the day)`
	email           = newPattern(`^[^@[:space:][:cntrl:]]{1,64}@([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`,
		"must be a valid email address")
)

func checkRange(errs field.ErrorList, path *field.Path, v, min, max int64) field.ErrorList {
	if v < min || v > max {
		errs = append(errs, field.Invalid(path, v, fmt.Sprintf("must be between %d and %d, inclusive", min, max)))
	}
	return errs
}

func checkLength(errs field.ErrorList, path *field.Path, v string, min, max int) field.ErrorList {
	n := utf8.RuneCountInString(v)
	if n < min || n > max {
		errs = append(errs, field.Invalid(path, v, fmt.Sprintf("must be %d-%d characters", min, max)))
	}
	return errs
}

func checkPattern(errs field.ErrorList, path *field.Path, v string, p pattern) field.ErrorList {
	if !p.re.MatchString(v) {
		errs = append(errs, field.Invalid(path, v, p.message))
	}
	return errs
}

func checkName(errs field.ErrorList, path *field.Path, v string, label bool) field.ErrorList {
	p, max := dns1123Subdomain, maxSubdomain
	if label {
		p, max = dns1123Label, maxLabel
	}
	switch {
	case v == "":
		return append(errs, field.Required(path, ""))
	case len(v) > max:
		return append(errs, field.Invalid(path, v, fmt.Sprintf("must be no more than %d characters", max)))
	}
	return checkPattern(errs, path, v, p)
}

func checkImage(errs field.ErrorList, v string) field.ErrorList {
	path := field.NewPath("spec", "image")
	if utf8.RuneCountInString(v) > maxImage {
		return append(errs, field.Invalid(path, v, fmt.Sprintf("must be no more than %d characters", maxImage)))
	}
	return checkPattern(errs, path, v, image)
}

// Resources as written: each quantity is a string or an integer matching the quantity pattern.
type Resources struct {
	Limits   map[string]json.RawMessage `json:"limits,omitempty"`
	Requests map[string]json.RawMessage `json:"requests,omitempty"`
}

func checkResources(errs field.ErrorList, path *field.Path, r *Resources) field.ErrorList {
	for _, part := range []struct {
		name string
		m    map[string]json.RawMessage
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		for k, raw := range part.m {
			p := path.Child(part.name).Child(k)
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				var n int64
				if err := json.Unmarshal(raw, &n); err != nil {
					errs = append(errs, field.Invalid(path, "(value omitted)", "expected an integer or a string"))
					continue
				}
				s = fmt.Sprint(n)
			}
			errs = checkPattern(errs, p, s, quantity)
		}
	}
	return errs
}

// MemcachedSpec is kubesteer's Memcached spec.
type MemcachedSpec struct {
	Size      *int32     `json:"size,omitempty"`
	Port      *int32     `json:"port,omitempty"`
	Image     *string    `json:"image,omitempty"`
	MemoryMB  *int32     `json:"memoryMB,omitempty"`
	Resources *Resources `json:"resources,omitempty"`
}

func (s *MemcachedSpec) Validate() (admissionWarnings []string, errs field.ErrorList) {
	spec := field.NewPath("spec")
	if s.Size != nil {
		errs = checkRange(errs, spec.Child("size"), int64(*s.Size), minReplicas, memcachedMaxSize)
	}
	if s.Port != nil {
		errs = checkRange(errs, spec.Child("port"), int64(*s.Port), minPort, maxPort)
	}
	if s.MemoryMB != nil {
		errs = checkRange(errs, spec.Child("memoryMB"), int64(*s.MemoryMB), memcachedMinMemoryMB, memcachedMaxMemoryMB)
	}
	if s.Image != nil {
		errs = checkImage(errs, *s.Image)
	}
	if s.Resources != nil {
		errs = checkResources(errs, spec.Child("resources"), s.Resources)
	}
	return nil, errs
}

// Memcached defaults: only what is missing is added.
func defaultMemcached(spec map[string]any, _ string) {
	setMissing(spec, "size", 1)
	setMissing(spec, "port", 11211)
	setMissing(spec, "image", "memcached:1.6.38-alpine")
	setMissing(spec, "memoryMB", 64)
	setMissing(spec, "resources", map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}})
}

type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// WelcomeSpec is kubesteer's Welcome spec.
type WelcomeSpec struct {
	Name              string        `json:"name"`
	UserID            *int32        `json:"userID,omitempty"`
	Groups            []string      `json:"groups,omitempty"`
	Email             *string       `json:"email,omitempty"`
	Password          *string       `json:"password,omitempty"`
	PasswordSecretRef *SecretKeyRef `json:"passwordSecretRef,omitempty"`
	Replicas          *int32        `json:"replicas,omitempty"`
	Port              *int32        `json:"port,omitempty"`
	ServiceType       *string       `json:"serviceType,omitempty"`
	Image             *string       `json:"image,omitempty"`
}

const plainPasswordWarning = "spec.password: the plain password stays readable in " +
	"this Welcome's spec.password (by anyone who may get Welcomes in this namespace, and in etcd " +
	"unencrypted), in its kubectl.kubernetes.io/last-applied-configuration annotation when applied " +
	"with client-side kubectl apply, and in apiserver audit logs at the Request level; only the " +
	"controller's copy is a Secret. Use spec.passwordSecretRef to keep it in a Secret alone"

func (s *WelcomeSpec) Validate() (warnings []string, errs field.ErrorList) {
	spec := field.NewPath("spec")
	if s.Name == "" {
		errs = append(errs, field.Required(spec.Child("name"), ""))
	} else {
		errs = checkLength(errs, spec.Child("name"), s.Name, welcomeMinName, welcomeMaxName)
	}
	if s.UserID != nil {
		errs = checkRange(errs, spec.Child("userID"), int64(*s.UserID), welcomeMinUserID, welcomeMaxUserID)
	}
	if s.Groups != nil {
		if len(s.Groups) > welcomeMaxGroups {
			errs = append(errs, field.TooMany(spec.Child("groups"), len(s.Groups), welcomeMaxGroups))
		}
		seen := map[string]bool{}
		for i, g := range s.Groups {
			p := spec.Child("groups").Index(i)
			before := len(errs)
			errs = checkLength(errs, p, g, welcomeMinGroup, welcomeMaxGroup)
			if len(errs) == before {
				if seen[g] {
					errs = append(errs, field.Duplicate(p, g))
				}
				seen[g] = true
			}
		}
	}
	if s.Email != nil {
		if utf8.RuneCountInString(*s.Email) > welcomeMaxEmail {
			errs = checkLength(errs, spec.Child("email"), *s.Email, 0, welcomeMaxEmail)
		} else {
			errs = checkPattern(errs, spec.Child("email"), *s.Email, email)
		}
	}
	if s.Password != nil {
		n := utf8.RuneCountInString(*s.Password)
		if n < welcomeMinPassword || n > welcomeMaxPassword {
			errs = append(errs, field.Invalid(spec.Child("password"), "(value omitted)",
				fmt.Sprintf("must be %d-%d characters", welcomeMinPassword, welcomeMaxPassword)))
		}
		if s.PasswordSecretRef != nil {
			errs = append(errs, field.Forbidden(spec.Child("passwordSecretRef"), "may not be combined with spec.password"))
		}
		warnings = append(warnings, plainPasswordWarning)
	}
	if r := s.PasswordSecretRef; r != nil {
		ref := spec.Child("passwordSecretRef")
		errs = checkName(errs, ref.Child("name"), r.Name, false)
		switch {
		case r.Key == "":
			errs = append(errs, field.Required(ref.Child("key"), ""))
		case len(r.Key) > maxSubdomain:
			errs = checkLength(errs, ref.Child("key"), r.Key, 1, maxSubdomain)
		default:
			errs = checkPattern(errs, ref.Child("key"), r.Key, secretKey)
		}
	}
	if s.Replicas != nil {
		errs = checkRange(errs, spec.Child("replicas"), int64(*s.Replicas), minReplicas, welcomeMaxReplicas)
	}
	if s.Port != nil {
		errs = checkRange(errs, spec.Child("port"), int64(*s.Port), minPort, maxPort)
	}
	if s.ServiceType != nil {
		switch *s.ServiceType {
		case "NodePort", "ClusterIP", "LoadBalancer":
		default:
			errs = append(errs, field.NotSupported(spec.Child("serviceType"), *s.ServiceType, []string{"NodePort", "ClusterIP", "LoadBalancer"}))
		}
	}
	if s.Image != nil {
		errs = checkImage(errs, *s.Image)
	}
	if len(errs) > 0 {
		warnings = nil
	}
	return warnings, errs
}

func defaultWelcome(spec map[string]any, _ string) {
	setMissing(spec, "replicas", 1)
	setMissing(spec, "port", 8088)
	setMissing(spec, "serviceType", "NodePort")
	setMissing(spec, "image", "hashicorp/http-echo:1.0.0")
}

// ScaleTargetRef names an object with a /scale subresource (v1beta1).
type ScaleTargetRef struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Name       string  `json:"name"`
	Namespace  *string `json:"namespace,omitempty"`
}

func (t ScaleTargetRef) group() string {
	if i := strings.Index(t.APIVersion, "/"); i >= 0 {
		return t.APIVersion[:i]
	}
	return ""
}

func (t ScaleTargetRef) namespaceOr(own string) string {
	if t.Namespace != nil {
		return *t.Namespace
	}
	return own
}

type ScaleJob struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	Replicas int32  `json:"replicas"`
}

// ScaleWindow is one window; start and end are an hour (int) or "HH:MM".
type ScaleWindow struct {
	Days     []string         `json:"days,omitempty"`
	Start    *json.RawMessage `json:"start"`
	End      *json.RawMessage `json:"end"`
	Replicas *int32           `json:"replicas,omitempty"`
}

type ScalerOverride struct {
	Replicas int32       `json:"replicas"`
	Until    metav1.Time `json:"until"`
}

// ScalerSpec is kubesteer's Scaler spec, v1beta1.
type ScalerSpec struct {
	ScaleTargetRefs []ScaleTargetRef `json:"scaleTargetRefs"`
	Windows         []ScaleWindow    `json:"windows,omitempty"`
	TimeZone        *string          `json:"timeZone,omitempty"`
	ExcludeDates    []string         `json:"excludeDates,omitempty"`
	Override        *ScalerOverride  `json:"override,omitempty"`
	OutsideReplicas *int32           `json:"outsideReplicas,omitempty"`
	Jobs            []ScaleJob       `json:"jobs,omitempty"`
	Suspend         *bool            `json:"suspend,omitempty"`
	HPACooperation  *string          `json:"hpaCooperation,omitempty"`
}

func (s *ScalerSpec) cooperates() bool {
	return s.HPACooperation == nil || *s.HPACooperation == "Enabled"
}

var weekdays = map[string]bool{"Mon": true, "Tue": true, "Wed": true, "Thu": true, "Fri": true, "Sat": true, "Sun": true}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var (
	kindPattern       = newPattern(`^[A-Z][A-Za-z0-9]*$`, `must be a kind such as "Deployment": an ASCII letter A-Z followed by letters and digits`)
	apiVersionPattern = newPattern(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$`, `must be "version" or "group/version", such as "apps/v1"`)
)

const excludeForms = `must be a date "YYYY-MM-DD", a range "YYYY-MM-DD..YYYY-MM-DD" or a yearly date "--MM-DD"`

func (s *ScalerSpec) timeZone() string {
	if s.TimeZone == nil {
		return "UTC"
	}
	return *s.TimeZone
}

// minutes of a window's end: a time of day, or the end of the day (24, "24:00") as 1440.
func endOfWindow(errs field.ErrorList, path *field.Path, raw *json.RawMessage) (int, field.ErrorList) {
	if raw != nil {
		var hour int64
		if err := json.Unmarshal(*raw, &hour); err == nil && hour == scalerEndOfDayHour {
			return 24 * 60, errs
		}
		var s string
		if err := json.Unmarshal(*raw, &s); err == nil && s == "24:00" {
			return 24 * 60, errs
		}
	}
	n := len(errs)
	minutes, errs := timeOfDay(errs, path, raw)
	for i := n; i < len(errs); i++ {
		if errs[i].Type == field.ErrorTypeInvalid {
			errs[i].Detail = endClockMessage
		}
	}
	return minutes, errs
}

// minutes of a time of day, or -1 with the error.
func timeOfDay(errs field.ErrorList, path *field.Path, raw *json.RawMessage) (int, field.ErrorList) {
	if raw == nil {
		return -1, append(errs, field.Required(path, ""))
	}
	var hour int64
	if err := json.Unmarshal(*raw, &hour); err == nil {
		if hour < 0 || hour > scalerMaxHour {
			return -1, append(errs, field.Invalid(path, hour, clock.message))
		}
		return int(hour) * 60, errs
	}
	var s string
	if err := json.Unmarshal(*raw, &s); err != nil {
		return -1, append(errs, field.Invalid(path, string(*raw), clock.message))
	}
	if !clock.re.MatchString(s) {
		return -1, append(errs, field.Invalid(path, s, clock.message))
	}
	t, err := time.Parse("15:04", s)
	if err != nil {
		return -1, append(errs, field.Invalid(path, s, clock.message))
	}
	return t.Hour()*60 + t.Minute(), errs
}

// checkExcludeDate: "YYYY-MM-DD", "YYYY-MM-DD..YYYY-MM-DD" or "--MM-DD".
func checkExcludeDate(d string) string {
	if md, ok := strings.CutPrefix(d, "--"); ok {
		if _, err := time.Parse("2006-01-02", "2000-"+md); err != nil || len(md) != 5 {
			return excludeForms + ": no such day of the year"
		}
		return ""
	}
	if a, b, ok := strings.Cut(d, ".."); ok {
		from, err1 := time.Parse("2006-01-02", a)
		to, err2 := time.Parse("2006-01-02", b)
		switch {
		case err1 != nil || err2 != nil:
			return excludeForms
		case to.Before(from):
			return "the end of a range must not be before its start"
		}
		return ""
	}
	if _, err := time.Parse("2006-01-02", d); err != nil {
		return excludeForms + ": " + err.Error()
	}
	return ""
}

func checkReplicas(errs field.ErrorList, path *field.Path, v int32) field.ErrorList {
	if v < minReplicas {
		errs = append(errs, field.Invalid(path, v, fmt.Sprintf("must be greater than or equal to %d", minReplicas)))
	}
	return errs
}

func (s *ScalerSpec) checkTimeZone(errs field.ErrorList) field.ErrorList {
	tz := s.timeZone()
	path := field.NewPath("spec", "timeZone")
	if utf8.RuneCountInString(tz) > scalerMaxTimeZone {
		return checkLength(errs, path, tz, 1, scalerMaxTimeZone)
	}
	if _, err := time.LoadLocation(tz); err != nil || tz == "" || tz == "Local" {
		errs = append(errs, field.Invalid(path, tz, `must be an IANA time zone name such as "Europe/Berlin"`))
	}
	return errs
}

func (s *ScalerSpec) checkTargets(errs field.ErrorList) field.ErrorList {
	refs := field.NewPath("spec", "scaleTargetRefs")
	switch {
	case len(s.ScaleTargetRefs) < scalerMinTargets:
		errs = append(errs, field.Required(refs, "must name at least one target"))
	case len(s.ScaleTargetRefs) > scalerMaxTargets:
		errs = append(errs, field.TooMany(refs, len(s.ScaleTargetRefs), scalerMaxTargets))
	}
	seen := map[[4]string]bool{}
	for i, t := range s.ScaleTargetRefs {
		p := refs.Index(i)
		switch {
		case t.APIVersion == "":
			errs = append(errs, field.Required(p.Child("apiVersion"), ""))
		case len(t.APIVersion) > scalerMaxAPIVersion:
			errs = checkLength(errs, p.Child("apiVersion"), t.APIVersion, 1, scalerMaxAPIVersion)
		default:
			errs = checkPattern(errs, p.Child("apiVersion"), t.APIVersion, apiVersionPattern)
		}
		switch {
		case t.Kind == "":
			errs = append(errs, field.Required(p.Child("kind"), ""))
		case len(t.Kind) > scalerMaxKind:
			errs = checkLength(errs, p.Child("kind"), t.Kind, 1, scalerMaxKind)
		default:
			errs = checkPattern(errs, p.Child("kind"), t.Kind, kindPattern)
		}
		errs = checkName(errs, p.Child("name"), t.Name, false)
		ns := "\x00"
		if t.Namespace != nil {
			errs = checkName(errs, p.Child("namespace"), *t.Namespace, true)
			ns = *t.Namespace
		}
		key := [4]string{t.group(), t.Kind, ns, t.Name}
		if seen[key] {
			errs = append(errs, field.Duplicate(p, t))
		}
		seen[key] = true
	}
	return errs
}

func (s *ScalerSpec) checkWindows(errs field.ErrorList) field.ErrorList {
	windows := field.NewPath("spec", "windows")
	switch {
	case len(s.Windows) < scalerMinWindows:
		errs = append(errs, field.Required(windows, "must have at least one window when given"))
	case len(s.Windows) > scalerMaxWindows:
		errs = append(errs, field.TooMany(windows, len(s.Windows), scalerMaxWindows))
	}
	for i, w := range s.Windows {
		p := windows.Index(i)
		var start, end int
		start, errs = timeOfDay(errs, p.Child("start"), w.Start)
		end, errs = endOfWindow(errs, p.Child("end"), w.End)
		if start >= 0 && start == end {
			var v any
			_ = json.Unmarshal(*w.End, &v)
			errs = append(errs, field.Invalid(p.Child("end"), v, "must differ from "+p.Child("start").String()))
		}
		if w.Replicas != nil {
			errs = checkReplicas(errs, p.Child("replicas"), *w.Replicas)
		}
		if w.Days != nil {
			switch {
			case len(w.Days) < scalerMinDays:
				errs = append(errs, field.Invalid(p.Child("days"), []string{}, "must name at least one day when given"))
			case len(w.Days) > scalerMaxDays:
				errs = append(errs, field.TooMany(p.Child("days"), len(w.Days), scalerMaxDays))
			}
			seenDay := map[string]bool{}
			for j, d := range w.Days {
				if !weekdays[d] {
					errs = append(errs, field.NotSupported(p.Child("days").Index(j), d, []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}))
				} else if seenDay[d] {
					errs = append(errs, field.Duplicate(p.Child("days").Index(j), d))
				}
				seenDay[d] = true
			}
		}
	}
	return errs
}

func (s *ScalerSpec) checkJobs(errs field.ErrorList) field.ErrorList {
	jobs := field.NewPath("spec", "jobs")
	switch {
	case len(s.Jobs) < scalerMinJobs:
		errs = append(errs, field.Required(jobs, "must have at least one job when given"))
	case len(s.Jobs) > scalerMaxJobs:
		errs = append(errs, field.TooMany(jobs, len(s.Jobs), scalerMaxJobs))
	}
	names := map[string]bool{}
	for i, j := range s.Jobs {
		p := jobs.Index(i)
		switch {
		case j.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case utf8.RuneCountInString(j.Name) > scalerMaxJobName:
			errs = checkLength(errs, p.Child("name"), j.Name, 1, scalerMaxJobName)
		case names[j.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), j.Name))
		}
		names[j.Name] = true
		if utf8.RuneCountInString(j.Schedule) > scalerMaxSchedule {
			errs = checkLength(errs, p.Child("schedule"), j.Schedule, 1, scalerMaxSchedule)
		} else if _, err := cronParser.Parse(j.Schedule); err != nil {
			errs = append(errs, field.Invalid(p.Child("schedule"), j.Schedule, err.Error()))
		}
		errs = checkReplicas(errs, p.Child("replicas"), j.Replicas)
	}
	return errs
}

func (s *ScalerSpec) Validate() (warnings []string, errs field.ErrorList) {
	spec := field.NewPath("spec")
	errs = s.checkTargets(errs)
	switch {
	case s.Windows != nil && s.Jobs != nil:
		errs = append(errs, field.Forbidden(spec.Child("windows"), "may not be combined with spec.jobs"))
	case s.Windows == nil && s.Jobs == nil:
		errs = append(errs, field.Required(spec.Child("windows"), "windows or jobs is required"))
	}
	if s.Windows != nil {
		errs = s.checkWindows(errs)
	}
	if s.Jobs != nil {
		errs = s.checkJobs(errs)
	}
	errs = s.checkTimeZone(errs)
	if s.ExcludeDates != nil {
		dates := spec.Child("excludeDates")
		if len(s.ExcludeDates) > scalerMaxExcludeDates {
			errs = append(errs, field.TooMany(dates, len(s.ExcludeDates), scalerMaxExcludeDates))
		}
		seen := map[string]bool{}
		for i, d := range s.ExcludeDates {
			p := dates.Index(i)
			if utf8.RuneCountInString(d) > scalerMaxExcludeDate {
				errs = checkLength(errs, p, d, 1, scalerMaxExcludeDate)
			} else if why := checkExcludeDate(d); why != "" {
				errs = append(errs, field.Invalid(p, d, why))
			} else if seen[d] {
				errs = append(errs, field.Duplicate(p, d))
			}
			seen[d] = true
		}
	}
	if o := s.Override; o != nil {
		errs = checkReplicas(errs, spec.Child("override", "replicas"), o.Replicas)
		if !o.Until.After(time.Now()) {
			errs = append(errs, field.Invalid(spec.Child("override", "until"), o.Until, "must be in the future"))
		}
	}
	if s.OutsideReplicas != nil {
		errs = checkReplicas(errs, spec.Child("outsideReplicas"), *s.OutsideReplicas)
	}
	return nil, errs
}

// defaultScaler fills the top-level defaults only: nothing inside a list item, as kubesteer.
func defaultScaler(spec map[string]any, _ string) {
	setMissing(spec, "timeZone", "UTC")
	setMissing(spec, "suspend", false)
}

func setMissing(m map[string]any, key string, v any) {
	if have, ok := m[key]; !ok || have == nil {
		m[key] = v
	}
}
