package check

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// componentLabel names a pod's Lucius component (gateway, orchestrator, …).
const componentLabel = "app.kubernetes.io/component"

// Problems collects what a check found wrong.
type Problems []string

func (p *Problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// workload is a pod template with where it came from.
type workload struct {
	kind, name string
	pod        corev1.PodTemplateSpec
}

func workloads(objs []Object) []workload {
	var out []workload
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{"Deployment", v.Name, v.Spec.Template})
		case *batchv1.Job:
			out = append(out, workload{"Job", v.Name, v.Spec.Template})
		}
	}
	return out
}

func ofType[T any](objs []Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.Value.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// CheckSecurity: every container of every workload runs as non-root, on a
// read-only root filesystem, without privilege escalation and with every
// capability dropped (none added).
func CheckSecurity(objs []Object) Problems {
	var p Problems
	for _, w := range workloads(objs) {
		podSC := w.pod.Spec.SecurityContext
		podNonRoot := podSC != nil && podSC.RunAsNonRoot != nil && *podSC.RunAsNonRoot
		if podSC != nil && podSC.RunAsUser != nil && *podSC.RunAsUser == 0 {
			p.add("%s %s: pod runs as user 0", w.kind, w.name)
		}
		if w.pod.Spec.HostNetwork || w.pod.Spec.HostPID || w.pod.Spec.HostIPC {
			p.add("%s %s: shares a host namespace", w.kind, w.name)
		}
		all := append(slices.Clone(w.pod.Spec.InitContainers), w.pod.Spec.Containers...)
		if len(all) == 0 {
			p.add("%s %s: no containers", w.kind, w.name)
		}
		for _, c := range all {
			where := fmt.Sprintf("%s %s container %s", w.kind, w.name, c.Name)
			sc := c.SecurityContext
			if sc == nil {
				p.add("%s: no securityContext", where)
				continue
			}
			nonRoot := podNonRoot
			if sc.RunAsNonRoot != nil {
				nonRoot = *sc.RunAsNonRoot
			}
			if !nonRoot {
				p.add("%s: runAsNonRoot is not true", where)
			}
			if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
				p.add("%s: runs as user 0", where)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				p.add("%s: readOnlyRootFilesystem is not true", where)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				p.add("%s: allowPrivilegeEscalation is not false", where)
			}
			if sc.Privileged != nil && *sc.Privileged {
				p.add("%s: privileged", where)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				p.add("%s: capabilities do not drop ALL", where)
			} else if len(sc.Capabilities.Add) > 0 {
				p.add("%s: adds capabilities %v", where, sc.Capabilities.Add)
			}
		}
	}
	return p
}

// CheckProbes: every container of every Deployment has a startup, a
// readiness (GET /readyz) and a liveness (GET /healthz) probe on a port it
// declares.
func CheckProbes(objs []Object) Problems {
	var p Problems
	for _, d := range ofType[*appsv1.Deployment](objs) {
		for _, c := range d.Spec.Template.Spec.Containers {
			where := fmt.Sprintf("Deployment %s container %s", d.Name, c.Name)
			for _, probe := range []struct {
				name, path string
				probe      *corev1.Probe
			}{{"startupProbe", "", c.StartupProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
				if probe.probe == nil {
					p.add("%s: no %s", where, probe.name)
					continue
				}
				get := probe.probe.HTTPGet
				if get == nil {
					p.add("%s: %s is not an HTTP GET", where, probe.name)
					continue
				}
				if probe.path != "" && get.Path != probe.path {
					p.add("%s: %s asks %s, want %s", where, probe.name, get.Path, probe.path)
				}
				if !declaresPort(c, get.Port.String()) {
					p.add("%s: %s uses port %s, which the container does not declare", where, probe.name, get.Port.String())
				}
			}
		}
	}
	return p
}

func declaresPort(c corev1.Container, port string) bool {
	for _, cp := range c.Ports {
		if cp.Name == port || fmt.Sprint(cp.ContainerPort) == port {
			return true
		}
	}
	return false
}

// CheckExposure: only the gateway is reachable from outside the cluster and
// namespace. Its Service alone may be a LoadBalancer or NodePort (or have
// external IPs); every pod is covered by a NetworkPolicy with ingress; a
// rule that admits any source (no from, an ipBlock, or every namespace)
// selects only gateway pods; the orchestrators take their gRPC callbacks
// from worker pods only.
func CheckExposure(objs []Object) Problems {
	var p Problems
	for _, s := range ofType[*corev1.Service](objs) {
		open := s.Spec.Type == corev1.ServiceTypeLoadBalancer || s.Spec.Type == corev1.ServiceTypeNodePort || len(s.Spec.ExternalIPs) > 0
		if open && s.Spec.Selector[componentLabel] != "gateway" {
			p.add("Service %s (%s) is reachable from outside but does not select the gateway", s.Name, s.Spec.Type)
		}
	}
	policies := ofType[*networkingv1.NetworkPolicy](objs)
	for _, w := range workloads(objs) {
		if w.kind != "Deployment" {
			continue
		}
		covered := false
		for _, np := range policies {
			if selects(np.Spec.PodSelector, w.pod.Labels) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				covered = true
			}
		}
		if !covered {
			p.add("Deployment %s: no NetworkPolicy limits its ingress", w.name)
		}
	}
	for _, np := range policies {
		gatewayOnly := np.Spec.PodSelector.MatchLabels[componentLabel] == "gateway"
		for i, rule := range np.Spec.Ingress {
			if admitsOutside(rule) && !gatewayOnly {
				p.add("NetworkPolicy %s rule %d admits traffic from outside, but selects more than the gateway", np.Name, i)
			}
		}
		if np.Spec.PodSelector.MatchLabels[componentLabel] == "orchestrator" {
			for i, rule := range np.Spec.Ingress {
				if !admitsPort(rule, "grpc") {
					continue
				}
				for _, peer := range rule.From {
					if peer.PodSelector == nil || peer.PodSelector.MatchLabels[componentLabel] != "worker" || peer.NamespaceSelector != nil {
						p.add("NetworkPolicy %s rule %d admits callbacks (gRPC) from someone other than the worker pods", np.Name, i)
					}
				}
				if len(rule.From) == 0 {
					p.add("NetworkPolicy %s rule %d admits callbacks (gRPC) from anyone", np.Name, i)
				}
			}
		}
	}
	return p
}

func selects(sel metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	return err == nil && s.Matches(labels.Set(podLabels))
}

func admitsOutside(rule networkingv1.NetworkPolicyIngressRule) bool {
	if len(rule.From) == 0 {
		return true
	}
	for _, peer := range rule.From {
		if peer.IPBlock != nil {
			return true
		}
		if ns := peer.NamespaceSelector; ns != nil && len(ns.MatchLabels) == 0 && len(ns.MatchExpressions) == 0 {
			return true
		}
	}
	return false
}

func admitsPort(rule networkingv1.NetworkPolicyIngressRule, name string) bool {
	if len(rule.Ports) == 0 {
		return true
	}
	for _, port := range rule.Ports {
		if port.Port == nil || port.Port.String() == name {
			return true
		}
	}
	return false
}

// secretName says which variable names and ConfigMap keys hold credentials.
var secretName = regexp.MustCompile(`(?i)(DATABASE_URL|PASSWORD|SECRET|CONNECTION_STRING|ACCOUNT_KEYS|TOKEN$|CALLBACK_KEYS$)`)

// literalCredential finds credentials written out: a URL with a password,
// a SAS key, a key=value password.
var literalCredential = regexp.MustCompile(`(?i)(://[^/\s:@]+:[^/\s@]+@|SharedAccessKey=|AccountKey=|password=)`)

// CheckSecretsByReference: the render holds no credential. No Secret has
// data (Secrets come from the operator or Key Vault), no ConfigMap key or
// value is one, and every variable named like a credential comes from a
// secretKeyRef (or names a file) rather than a literal value.
func CheckSecretsByReference(objs []Object) Problems {
	var p Problems
	for _, s := range ofType[*corev1.Secret](objs) {
		if len(s.Data) > 0 || len(s.StringData) > 0 {
			p.add("Secret %s carries data in the chart", s.Name)
		}
	}
	for _, cm := range ofType[*corev1.ConfigMap](objs) {
		for k, v := range cm.Data {
			if secretName.MatchString(k) {
				p.add("ConfigMap %s holds %s, a credential", cm.Name, k)
			}
			if literalCredential.MatchString(v) {
				p.add("ConfigMap %s key %s holds a literal credential", cm.Name, k)
			}
		}
	}
	for _, w := range workloads(objs) {
		for _, c := range append(slices.Clone(w.pod.Spec.InitContainers), w.pod.Spec.Containers...) {
			for _, e := range c.Env {
				where := fmt.Sprintf("%s %s container %s: %s", w.kind, w.name, c.Name, e.Name)
				if literalCredential.MatchString(e.Value) {
					p.add("%s holds a literal credential", where)
				}
				if !secretName.MatchString(e.Name) || strings.HasSuffix(e.Name, "_FILE") {
					continue
				}
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					p.add("%s is not read from a Secret", where)
				}
			}
		}
	}
	for _, so := range ofType[*monitoringv1.ServiceMonitor](objs) {
		for _, ep := range so.Spec.Endpoints {
			if ep.Authorization != nil && ep.Authorization.Credentials == nil {
				p.add("ServiceMonitor %s: authorization without a Secret reference", so.Name)
			}
		}
	}
	return p
}

// CheckReferences: what objects name exists in the render. Deployments'
// ConfigMaps and service account, Services', PDBs' and NetworkPolicies'
// selectors match pods, HPAs and ScaledObjects target rendered Deployments
// (never both the same one), ScaledObjects' triggers name a rendered
// TriggerAuthentication and carry the metadata their scaler needs.
func CheckReferences(objs []Object) Problems {
	var p Problems
	names := map[string]bool{}
	for _, o := range objs {
		names[o.Kind+"/"+o.Name] = true
	}
	deployments := ofType[*appsv1.Deployment](objs)
	for _, w := range workloads(objs) {
		spec := w.pod.Spec
		if sa := spec.ServiceAccountName; sa != "" && !names["ServiceAccount/"+sa] {
			p.add("%s %s: service account %s is not rendered", w.kind, w.name, sa)
		}
		for _, c := range spec.Containers {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && !names["ConfigMap/"+ef.ConfigMapRef.Name] {
					p.add("%s %s: ConfigMap %s is not rendered", w.kind, w.name, ef.ConfigMapRef.Name)
				}
			}
		}
		for _, v := range spec.Volumes {
			if v.CSI != nil && !names["SecretProviderClass/"+v.CSI.VolumeAttributes["secretProviderClass"]] {
				p.add("%s %s: SecretProviderClass %s is not rendered", w.kind, w.name, v.CSI.VolumeAttributes["secretProviderClass"])
			}
		}
	}
	matchesDeployment := func(sel map[string]string) bool {
		for _, d := range deployments {
			if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
				return true
			}
		}
		return false
	}
	for _, s := range ofType[*corev1.Service](objs) {
		if !matchesDeployment(s.Spec.Selector) {
			p.add("Service %s selects no Deployment's pods", s.Name)
		}
	}
	for _, pdb := range ofType[*policyv1.PodDisruptionBudget](objs) {
		if pdb.Spec.Selector == nil || !matchesDeployment(pdb.Spec.Selector.MatchLabels) {
			p.add("PodDisruptionBudget %s selects no Deployment's pods", pdb.Name)
		}
	}
	for _, d := range deployments {
		if !selects(*d.Spec.Selector, d.Spec.Template.Labels) {
			p.add("Deployment %s: its selector does not match its pods", d.Name)
		}
	}
	scaled := map[string]string{}
	for _, h := range ofType[*autoscalingv2.HorizontalPodAutoscaler](objs) {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || !names["Deployment/"+h.Spec.ScaleTargetRef.Name] {
			p.add("HorizontalPodAutoscaler %s targets %s %s, not a rendered Deployment", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
		scaled[h.Spec.ScaleTargetRef.Name] = "HorizontalPodAutoscaler " + h.Name
	}
	for _, so := range ofType[*kedav1alpha1.ScaledObject](objs) {
		target := so.Spec.ScaleTargetRef
		if target == nil || target.Kind != "Deployment" || !names["Deployment/"+target.Name] {
			p.add("ScaledObject %s does not target a rendered Deployment", so.Name)
			continue
		}
		if other, ok := scaled[target.Name]; ok {
			p.add("ScaledObject %s and %s both scale %s", so.Name, other, target.Name)
		}
		scaled[target.Name] = "ScaledObject " + so.Name
		if len(so.Spec.Triggers) == 0 {
			p.add("ScaledObject %s has no triggers", so.Name)
		}
		for _, tr := range so.Spec.Triggers {
			where := fmt.Sprintf("ScaledObject %s trigger %s", so.Name, tr.Name)
			if tr.AuthenticationRef == nil || !names["TriggerAuthentication/"+tr.AuthenticationRef.Name] {
				p.add("%s: no rendered TriggerAuthentication", where)
			}
			var need []string
			switch tr.Type {
			case "azure-servicebus":
				need = []string{"messageCount"}
				if tr.Metadata["queueName"] == "" && (tr.Metadata["topicName"] == "" || tr.Metadata["subscriptionName"] == "") {
					p.add("%s: names neither a queue nor a topic and subscription", where)
				}
			case "postgresql":
				need = []string{"query", "targetQueryValue"}
				if q := tr.Metadata["query"]; !strings.HasPrefix(q, "SELECT count(*) FROM bus_messages WHERE ") {
					p.add("%s: the query %q does not count bus_messages", where, q)
				}
			default:
				p.add("%s: scaler type %q", where, tr.Type)
			}
			for _, k := range need {
				if tr.Metadata[k] == "" {
					p.add("%s: no %s", where, k)
				}
			}
		}
	}
	for _, d := range deployments {
		if _, ok := scaled[d.Name]; ok && d.Spec.Replicas != nil {
			p.add("Deployment %s sets replicas although %s scales it (an upgrade would reset the count)", d.Name, scaled[d.Name])
		}
	}
	return p
}
