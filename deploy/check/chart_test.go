package check

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
)

// chartDir is the chart, from this package's folder.
const chartDir = "../helm/lucius"

// kubeVersion is the cluster version helm renders for (the chart wants
// 1.27 or later; a helm built with go install assumes 1.20).
const kubeVersion = "1.31.0"

// renders are the value sets the tests render: the defaults, the production
// example, and the defaults with KEDA on the PostgreSQL bus, the
// ServiceMonitor, a JWKS file and worker tokens from the Secrets turned on.
var renders = []struct {
	name string
	args []string
}{
	{"default", nil},
	{"production", []string{"-f", chartDir + "/values-production.yaml"}},
	{"keda-postgres", []string{"--set", "keda.enabled=true", "--set", "serviceMonitor.enabled=true",
		"--set", "config.auth.jwksFile=true", "--set", "workers.tokenFromSecret=true"}},
}

// helm returns the pinned helm make deploy-check installs ($HELM, or helm on
// PATH, which the Makefile puts .build/bin first on).
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatal("no helm: run `make deploy-check`, which installs the pinned helm into .build/bin")
	}
	return h
}

func render(t *testing.T, args ...string) []Object {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "lucius", chartDir, "--namespace", "lucius", "--kube-version", kubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("decode the render: %v", err)
	}
	return objs
}

func report(t *testing.T, what string, p Problems) {
	t.Helper()
	if len(p) > 0 {
		t.Errorf("%s:\n  %s", what, strings.Join(p, "\n  "))
	}
}

func kinds(objs []Object) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.Kind]++
	}
	return n
}

func TestEveryRenderDecodesStrictlyAndKeepsTheChartsPromises(t *testing.T) {
	t.Parallel()
	for _, r := range renders {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, r.args...)
			// Four services and four worker pools, each with a Service and a PDB.
			n := kinds(objs)
			for kind, want := range map[string]int{"Deployment": 8, "Service": 8, "PodDisruptionBudget": 8, "Job": 1, "ConfigMap": 1} {
				if n[kind] != want {
					t.Errorf("%d %s objects, want %d (all: %v)", n[kind], kind, want, n)
				}
			}
			report(t, "security contexts", CheckSecurity(objs))
			report(t, "probes", CheckProbes(objs))
			report(t, "exposure", CheckExposure(objs))
			report(t, "references", CheckReferences(objs))
			if r.name == "production" {
				report(t, "secrets", CheckSecretsByReference(objs))
			}
		})
	}
}

// The production example uses what it says it does: Service Bus through
// workload identity (no connection string anywhere), Key Vault through the
// CSI driver, KEDA on Service Bus depth for the orchestrators and every
// worker pool, the ServiceMonitor, and the migration hook Job.
func TestProductionRenderUsesServiceBusWorkloadIdentityAndKeyVault(t *testing.T) {
	t.Parallel()
	objs := render(t, renders[1].args...)
	n := kinds(objs)
	for kind, want := range map[string]int{"ScaledObject": 5, "TriggerAuthentication": 1, "SecretProviderClass": 2,
		"ServiceMonitor": 1, "HorizontalPodAutoscaler": 1, "ServiceAccount": 1} {
		if n[kind] != want {
			t.Errorf("%d %s objects, want %d", n[kind], kind, want)
		}
	}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *corev1.ConfigMap:
			if v.Data["LUCIUS_BUS"] != "servicebus" || !strings.HasSuffix(v.Data["LUCIUS_SERVICEBUS_NAMESPACE"], ".servicebus.windows.net") {
				t.Errorf("ConfigMap: bus %q namespace %q", v.Data["LUCIUS_BUS"], v.Data["LUCIUS_SERVICEBUS_NAMESPACE"])
			}
		case *corev1.ServiceAccount:
			if v.Annotations["azure.workload.identity/client-id"] == "" {
				t.Errorf("ServiceAccount %s has no workload identity client id", v.Name)
			}
		case *appsv1.Deployment:
			checkWorkloadIdentityPod(t, "Deployment "+v.Name, v.Spec.Template)
		case *batchv1.Job:
			checkWorkloadIdentityPod(t, "Job "+v.Name, v.Spec.Template)
			if v.Annotations["helm.sh/hook"] == "" || !slices.Equal(v.Spec.Template.Spec.Containers[0].Command, []string{"orchestrator", "migrate"}) {
				t.Errorf("Job %s: hook %q command %v, want a hook running orchestrator migrate", v.Name, v.Annotations["helm.sh/hook"],
					v.Spec.Template.Spec.Containers[0].Command)
			}
		case *kedav1alpha1.TriggerAuthentication:
			if v.Spec.PodIdentity == nil || v.Spec.PodIdentity.Provider != kedav1alpha1.PodIdentityProviderAzureWorkload || len(v.Spec.SecretTargetRef) > 0 {
				t.Errorf("TriggerAuthentication %s: want azure-workload pod identity and no secrets, got %+v", v.Name, v.Spec)
			}
		case *kedav1alpha1.ScaledObject:
			for _, tr := range v.Spec.Triggers {
				if tr.Type != "azure-servicebus" || tr.Metadata["namespace"] == "" || strings.Contains(tr.Metadata["namespace"], ".") {
					t.Errorf("ScaledObject %s trigger %s: type %s namespace %q, want azure-servicebus with the namespace's name",
						v.Name, tr.Name, tr.Type, tr.Metadata["namespace"])
				}
			}
			// A worker pool's triggers cover all 32 directive topics of the default topology.
			if strings.Contains(v.Name, "worker-") && len(v.Spec.Triggers) != 32 {
				t.Errorf("ScaledObject %s has %d triggers, want one per directive topic (32)", v.Name, len(v.Spec.Triggers))
			}
		}
	}
}

func checkWorkloadIdentityPod(t *testing.T, where string, pod corev1.PodTemplateSpec) {
	t.Helper()
	if pod.Labels["azure.workload.identity/use"] != "true" {
		t.Errorf("%s: pods lack the azure.workload.identity/use label", where)
	}
	csi := false
	for _, v := range pod.Spec.Volumes {
		if v.CSI != nil && v.CSI.Driver == "secrets-store.csi.k8s.io" {
			csi = true
		}
	}
	if !csi {
		t.Errorf("%s: no Key Vault (Secrets Store CSI) volume", where)
	}
}

// On the PostgreSQL bus the scalers count bus_messages rows of exactly the
// paths each receiver drains: the orchestrators' queue and subscription, and
// for a worker pool its services' 32 directive subscriptions.
func TestPostgresScalersCountTheReceiversOwnPaths(t *testing.T) {
	t.Parallel()
	objs := render(t, renders[2].args...)
	queries := map[string]string{}
	for _, so := range ofType[*kedav1alpha1.ScaledObject](objs) {
		if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "postgresql" {
			t.Fatalf("ScaledObject %s: triggers %+v, want one postgresql", so.Name, so.Spec.Triggers)
		}
		queries[so.Name] = so.Spec.Triggers[0].Metadata["query"]
	}
	if q := queries["lucius-orchestrator"]; !strings.Contains(q, "path IN ('orchestrator-jobs', 'orchestrator-events/subscriptions/orchestrator')") {
		t.Errorf("orchestrator query %q", q)
	}
	pool := queries["lucius-worker-raster-tiles-demo"]
	for _, svc := range []string{"raster", "tiles", "demo"} {
		if got := strings.Count(pool, "/subscriptions/"+svc+"'"); got != 32 {
			t.Errorf("the raster-tiles-demo query names %d subscriptions of %s, want 32", got, svc)
		}
	}
	if strings.Contains(queries["lucius-worker-ocr"], "embedding") {
		t.Errorf("the ocr pool's query counts another service's messages: %s", queries["lucius-worker-ocr"])
	}
}

// A pool named like no DNS label, or with no services, is refused at render time.
func TestChartRefusesABadWorkerPool(t *testing.T) {
	t.Parallel()
	for _, set := range []string{"workers.pools[0].name=Bad_Name,workers.pools[0].services={ocr}", "workers.pools[0].name=empty"} {
		cmd := exec.Command(helm(t), "template", "lucius", chartDir, "--kube-version", kubeVersion, "--set", set)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "workers.pools") {
			t.Errorf("--set %s rendered (%v): %s", set, err, out)
		}
	}
}
