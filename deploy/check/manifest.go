// Package check decodes the manifests the Helm chart deploy/helm/lucius
// renders, strictly (a field the API type lacks is an error), against the
// Kubernetes API types, KEDA's and the Prometheus Operator's, and checks the
// properties the chart promises: non-root, read-only containers without
// capabilities, probes on every Deployment, only the gateway open to the
// outside, secrets by reference. It is its own module so that the Kubernetes
// dependencies stay out of the services' modules; `make deploy-check` runs it.
package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// Object is one decoded manifest.
type Object struct {
	Source string // the chart template it came from (helm's "# Source:" line)
	Kind   string
	Name   string
	Value  any // a pointer to the typed object
}

// newObject returns an empty typed object for apiVersion and kind, or nil
// when the chart is not expected to render that kind.
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "batch/v1/Job":
		return &batchv1.Job{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "keda.sh/v1alpha1/ScaledObject":
		return &kedav1alpha1.ScaledObject{}
	case "keda.sh/v1alpha1/TriggerAuthentication":
		return &kedav1alpha1.TriggerAuthentication{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}
	case "secrets-store.csi.x-k8s.io/v1/SecretProviderClass":
		return &SecretProviderClass{}
	}
	return nil
}

// Decode splits a multi-document YAML stream (helm template's output) and
// decodes every document strictly into its API type.
func Decode(stream []byte) ([]Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var out []Object
	var errs []error
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		source := sourceOf(doc)
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		if meta.Kind == "" && meta.APIVersion == "" {
			continue // a template that rendered nothing
		}
		obj := newObject(meta.APIVersion, meta.Kind)
		if obj == nil {
			errs = append(errs, fmt.Errorf("%s: %s %s is not a kind the chart may render", source, meta.APIVersion, meta.Kind))
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", source, meta.Kind, err))
			continue
		}
		out = append(out, Object{Source: source, Kind: meta.Kind, Name: nameOf(obj), Value: obj})
	}
	return out, errors.Join(errs...)
}

func sourceOf(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		if s, ok := strings.CutPrefix(line, "# Source: "); ok {
			return s
		}
	}
	return "(no source)"
}

func nameOf(obj any) string {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetName()
	}
	if s, ok := obj.(*SecretProviderClass); ok {
		return s.Name
	}
	return ""
}

// SecretProviderClass is the Secrets Store CSI driver's
// secrets-store.csi.x-k8s.io/v1 SecretProviderClass, as far as the chart uses
// it. Its Go module (sigs.k8s.io/secrets-store-csi-driver) is not served by
// the module proxy this project builds from, so this copies the fields of
// its apis/v1 types; decoding is strict all the same.
type SecretProviderClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SecretProviderClassSpec `json:"spec,omitempty"`
}

// SecretProviderClassSpec is the driver's SecretProviderClassSpec.
type SecretProviderClassSpec struct {
	Provider      string            `json:"provider,omitempty"`
	Parameters    map[string]string `json:"parameters,omitempty"`
	SecretObjects []*SecretObject   `json:"secretObjects,omitempty"`
}

// SecretObject is a Kubernetes Secret the driver syncs from mounted objects.
type SecretObject struct {
	SecretName  string              `json:"secretName,omitempty"`
	Type        string              `json:"type,omitempty"`
	Labels      map[string]string   `json:"labels,omitempty"`
	Annotations map[string]string   `json:"annotations,omitempty"`
	Data        []*SecretObjectData `json:"data,omitempty"`
}

// SecretObjectData is one key of a synced Secret.
type SecretObjectData struct {
	ObjectName string `json:"objectName,omitempty"`
	Key        string `json:"key,omitempty"`
}
