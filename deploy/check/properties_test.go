package check

import (
	"strings"
	"testing"
)

// good is a minimal render that passes every check: a gateway and a worker
// Deployment, their Services and PDBs, the policies.
const good = `
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {LUCIUS_BUS: postgres}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gw}
spec:
  selector: {matchLabels: {app.kubernetes.io/component: gateway}}
  template:
    metadata: {labels: {app.kubernetes.io/component: gateway}}
    spec:
      serviceAccountName: sa
      securityContext: {runAsNonRoot: true, runAsUser: 65532}
      containers:
        - name: gateway
          image: lucius
          envFrom: [{configMapRef: {name: cfg}}]
          env:
            - name: DATABASE_URL
              valueFrom: {secretKeyRef: {name: s, key: database-url}}
          ports: [{name: http, containerPort: 8080}, {name: grpc, containerPort: 9090}]
          startupProbe: {httpGet: {path: /healthz, port: http}}
          readinessProbe: {httpGet: {path: /readyz, port: http}}
          livenessProbe: {httpGet: {path: /healthz, port: http}}
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: orch}
spec:
  selector: {matchLabels: {app.kubernetes.io/component: orchestrator}}
  template:
    metadata: {labels: {app.kubernetes.io/component: orchestrator}}
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
        - name: orchestrator
          image: lucius
          ports: [{name: http, containerPort: 8081}, {name: grpc, containerPort: 9091}]
          startupProbe: {httpGet: {path: /healthz, port: http}}
          readinessProbe: {httpGet: {path: /readyz, port: http}}
          livenessProbe: {httpGet: {path: /healthz, port: 8081}}
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
---
apiVersion: v1
kind: Service
metadata: {name: gw}
spec:
  type: LoadBalancer
  selector: {app.kubernetes.io/component: gateway}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: orch}
spec:
  selector: {app.kubernetes.io/component: orchestrator}
  ports: [{name: grpc, port: 9091}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: gw}
spec:
  minAvailable: 1
  selector: {matchLabels: {app.kubernetes.io/component: gateway}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: gw}
spec:
  podSelector: {matchLabels: {app.kubernetes.io/component: gateway}}
  policyTypes: [Ingress]
  ingress: [{ports: [{port: http}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: orch}
spec:
  podSelector: {matchLabels: {app.kubernetes.io/component: orchestrator}}
  policyTypes: [Ingress]
  ingress:
    - from: [{podSelector: {matchLabels: {app.kubernetes.io/component: worker}}}]
      ports: [{port: grpc}]
`

func decodeOK(t *testing.T, s string) []Object {
	t.Helper()
	objs, err := Decode([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func allChecks(objs []Object) Problems {
	var p Problems
	for _, check := range []func([]Object) Problems{CheckSecurity, CheckProbes, CheckExposure, CheckSecretsByReference, CheckReferences} {
		p = append(p, check(objs)...)
	}
	return p
}

func TestTheGoodRenderPassesEveryCheck(t *testing.T) {
	t.Parallel()
	if p := allChecks(decodeOK(t, good)); len(p) > 0 {
		t.Fatalf("problems: %v", p)
	}
}

// Each change breaks one promise, and the check that guards it says so.
func TestEachBrokenPromiseIsReported(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, old, new, want string
	}{
		{"root user", "securityContext: {runAsNonRoot: true, runAsUser: 65532}", "securityContext: {runAsUser: 0}", "runAsNonRoot is not true"},
		{"writable root", "readOnlyRootFilesystem: true\n            allowPrivilegeEscalation: false\n            capabilities: {drop: [ALL]}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: orch}",
			"readOnlyRootFilesystem: false\n            allowPrivilegeEscalation: false\n            capabilities: {drop: [ALL]}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: orch}", "readOnlyRootFilesystem is not true"},
		{"capabilities kept", "capabilities: {drop: [ALL]}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: orch}",
			"capabilities: {drop: [NET_RAW]}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: orch}", "do not drop ALL"},
		{"no readiness probe", "          readinessProbe: {httpGet: {path: /readyz, port: http}}\n          livenessProbe: {httpGet: {path: /healthz, port: 8081}}",
			"          livenessProbe: {httpGet: {path: /healthz, port: 8081}}", "no readinessProbe"},
		{"readiness on healthz", "readinessProbe: {httpGet: {path: /readyz, port: http}}\n          livenessProbe: {httpGet: {path: /healthz, port: http}}",
			"readinessProbe: {httpGet: {path: /healthz, port: http}}\n          livenessProbe: {httpGet: {path: /healthz, port: http}}", "want /readyz"},
		{"probe on an undeclared port", "livenessProbe: {httpGet: {path: /healthz, port: 8081}}", "livenessProbe: {httpGet: {path: /healthz, port: 9999}}", "does not declare"},
		{"orchestrator exposed", "selector: {app.kubernetes.io/component: orchestrator}\n  ports", "type: NodePort\n  selector: {app.kubernetes.io/component: orchestrator}\n  ports", "does not select the gateway"},
		{"orchestrator open to all", "    - from: [{podSelector: {matchLabels: {app.kubernetes.io/component: worker}}}]\n      ports: [{port: grpc}]",
			"    - ports: [{port: grpc}]", "admits traffic from outside"},
		{"callbacks from the gateway", "from: [{podSelector: {matchLabels: {app.kubernetes.io/component: worker}}}]",
			"from: [{podSelector: {matchLabels: {app.kubernetes.io/component: gateway}}}]", "other than the worker pods"},
		{"no policy", "podSelector: {matchLabels: {app.kubernetes.io/component: orchestrator}}", "podSelector: {matchLabels: {nobody: here}}", "no NetworkPolicy limits"},
		{"literal database url", "valueFrom: {secretKeyRef: {name: s, key: database-url}}", "value: postgres://lucius:hunter2@db/lucius", "literal credential"},
		{"credential in the ConfigMap", "data: {LUCIUS_BUS: postgres}", "data: {LUCIUS_SERVICEBUS_CONNECTION_STRING: x}", "a credential"},
		{"missing ConfigMap", "configMapRef: {name: cfg}", "configMapRef: {name: other}", "ConfigMap other is not rendered"},
		{"PDB selecting nothing", "minAvailable: 1\n  selector: {matchLabels: {app.kubernetes.io/component: gateway}}",
			"minAvailable: 1\n  selector: {matchLabels: {app.kubernetes.io/component: gone}}", "selects no Deployment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !strings.Contains(good, tt.old) {
				t.Fatalf("the good render has no %q", tt.old)
			}
			p := allChecks(decodeOK(t, strings.Replace(good, tt.old, tt.new, 1)))
			if !strings.Contains(strings.Join(p, "\n"), tt.want) {
				t.Fatalf("problems %v, want one saying %q", p, tt.want)
			}
		})
	}
}

func TestDecodeRefusesUnknownFieldsAndKinds(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"a misspelt field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replica: 2}", "unknown field"},
		{"a field of another kind", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {replicas: 2}", "unknown field"},
		{"a KEDA field", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: s}\nspec: {scaleTargetRef: {name: d}, minReplicas: 1, triggers: []}", "unknown field"},
		{"a ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: s}\nspec: {selector: {}, endpoint: []}", "unknown field"},
		{"a SecretProviderClass field", "apiVersion: secrets-store.csi.x-k8s.io/v1\nkind: SecretProviderClass\nmetadata: {name: s}\nspec: {provider: azure, params: {}}", "unknown field"},
		{"an unexpected kind", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}", "not a kind the chart may render"},
		{"a duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nmetadata: {name: d}", "already set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, want an error with %q", err, tt.want)
			}
		})
	}
}
