package main

// The field rules of kubesteer's api/src/rules.rs, memcached.rs, welcome.rs and scaler.rs,
// written the way a kubebuilder project would write them: typed specs, a field.ErrorList,
// regexps compiled once at package init.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
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
	email = newPattern(`^[^@[:space:][:cntrl:]]{1,64}@([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`,
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

type ScaleTarget struct {
	Name      string  `json:"name"`
	Namespace *string `json:"namespace,omitempty"`
}

type ScaleJob struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	Replicas int32  `json:"replicas"`
}

// ScalerSpec is kubesteer's Scaler spec; start and end are an hour (int) or "HH:MM".
type ScalerSpec struct {
	Deployments     []ScaleTarget    `json:"deployments"`
	Start           *json.RawMessage `json:"start,omitempty"`
	End             *json.RawMessage `json:"end,omitempty"`
	Replicas        *int32           `json:"replicas,omitempty"`
	Days            []string         `json:"days,omitempty"`
	TimeZone        *string          `json:"timeZone,omitempty"`
	OutsideReplicas *int32           `json:"outsideReplicas,omitempty"`
	Jobs            []ScaleJob       `json:"jobs,omitempty"`
	Suspend         *bool            `json:"suspend,omitempty"`
}

var weekdays = map[string]bool{"Mon": true, "Tue": true, "Wed": true, "Thu": true, "Fri": true, "Sat": true, "Sun": true}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func (s *ScalerSpec) timeZone() string {
	if s.TimeZone == nil {
		return "UTC"
	}
	return *s.TimeZone
}

// minutes of a time of day, or -1 with the error.
func timeOfDay(errs field.ErrorList, path *field.Path, raw *json.RawMessage) (int, field.ErrorList) {
	if raw == nil {
		return -1, append(errs, field.Required(path, "start and end are required unless jobs are given"))
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

func (s *ScalerSpec) Validate() (warnings []string, errs field.ErrorList) {
	spec := field.NewPath("spec")
	deps := spec.Child("deployments")
	switch {
	case len(s.Deployments) < scalerMinTargets:
		errs = append(errs, field.Required(deps, "must name at least one Deployment"))
	case len(s.Deployments) > scalerMaxTargets:
		errs = append(errs, field.TooMany(deps, len(s.Deployments), scalerMaxTargets))
	}
	seen := map[[2]string]bool{}
	for i, t := range s.Deployments {
		p := deps.Index(i)
		errs = checkName(errs, p.Child("name"), t.Name, false)
		ns := "\x00"
		if t.Namespace != nil {
			errs = checkName(errs, p.Child("namespace"), *t.Namespace, true)
			ns = *t.Namespace
		}
		key := [2]string{ns, t.Name}
		if seen[key] {
			errs = append(errs, field.Duplicate(p, t))
		}
		seen[key] = true
	}
	for _, r := range []struct {
		name string
		v    *int32
	}{{"replicas", s.Replicas}, {"outsideReplicas", s.OutsideReplicas}} {
		if r.v != nil && *r.v < minReplicas {
			errs = append(errs, field.Invalid(spec.Child(r.name), *r.v, fmt.Sprintf("must be greater than or equal to %d", minReplicas)))
		}
	}
	if s.Days != nil {
		switch {
		case len(s.Days) < scalerMinDays:
			errs = append(errs, field.Invalid(spec.Child("days"), []string{}, "must name at least one day when given"))
		case len(s.Days) > scalerMaxDays:
			errs = append(errs, field.TooMany(spec.Child("days"), len(s.Days), scalerMaxDays))
		}
		seenDay := map[string]bool{}
		for i, d := range s.Days {
			if !weekdays[d] {
				errs = append(errs, field.NotSupported(spec.Child("days").Index(i), d, []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}))
			} else if seenDay[d] {
				errs = append(errs, field.Duplicate(spec.Child("days").Index(i), d))
			}
			seenDay[d] = true
		}
	}
	if s.Jobs != nil {
		for _, f := range []struct {
			name string
			set  bool
		}{{"start", s.Start != nil}, {"end", s.End != nil}, {"replicas", s.Replicas != nil}} {
			if f.set {
				errs = append(errs, field.Forbidden(spec.Child(f.name), "may not be combined with spec.jobs"))
			}
		}
		jobs := spec.Child("jobs")
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
			if j.Replicas < minReplicas {
				errs = append(errs, field.Invalid(p.Child("replicas"), j.Replicas, fmt.Sprintf("must be greater than or equal to %d", minReplicas)))
			}
		}
		errs = s.checkTimeZone(errs)
	} else {
		errs = s.checkTimeZone(errs)
		var start, end int
		start, errs = timeOfDay(errs, spec.Child("start"), s.Start)
		end, errs = timeOfDay(errs, spec.Child("end"), s.End)
		if start >= 0 && start == end {
			var v any
			_ = json.Unmarshal(*s.End, &v)
			errs = append(errs, field.Invalid(spec.Child("end"), v, "must differ from spec.start"))
		}
	}
	return nil, errs
}

func defaultScaler(spec map[string]any, namespace string) {
	if namespace != "" {
		if deps, ok := spec["deployments"].([]any); ok {
			for _, d := range deps {
				if m, ok := d.(map[string]any); ok {
					setMissing(m, "namespace", namespace)
				}
			}
		}
	}
	if _, cronMode := spec["jobs"]; !cronMode {
		setMissing(spec, "replicas", 1)
	}
	setMissing(spec, "timeZone", "UTC")
	setMissing(spec, "suspend", false)
}

func setMissing(m map[string]any, key string, v any) {
	if have, ok := m[key]; !ok || have == nil {
		m[key] = v
	}
}
