// A partner's script: it calls a Lucius gateway through a TypeScript client
// that no one here wrote. openapi-typescript generated schema.d.ts from the
// document the gateway serves at /openapi.json; openapi-fetch makes the
// calls. It submits a command, reads the job and its steps, cancels it, and
// reads the reason of an error, then prints what it saw as one JSON line.
// tools/e2e TestTypeScriptClientGeneratedFromTheOpenAPIDocument runs it
// against a real suite (env: LUCIUS_URL, LUCIUS_TOKEN, LUCIUS_TENANT,
// LUCIUS_INPUT_REF, LUCIUS_OUTPUT_REF).
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type Status = components["schemas"]["google.rpc.Status"];

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

function check(ok: boolean, what: string, got: unknown): void {
  if (!ok) throw new Error(`${what}: ${JSON.stringify(got)}`);
}

// reason is the ErrorInfo reason among a status's details (AIP-193).
function reason(status: Status | undefined): string | undefined {
  for (const d of status?.details ?? []) {
    if (d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo" && "reason" in d) {
      return d.reason as string;
    }
  }
  return undefined;
}

const client = createClient<paths>({
  baseUrl: env("LUCIUS_URL"),
  headers: { Authorization: `Bearer ${env("LUCIUS_TOKEN")}` },
});

const submitted = await client.POST("/v1/commands", {
  body: {
    tenant_id: env("LUCIUS_TENANT"),
    request_type: "E2E_MANUAL",
    schema_version: "1",
    input_ref: env("LUCIUS_INPUT_REF"),
    output_ref: env("LUCIUS_OUTPUT_REF"),
    payload: {},
  },
});
check(submitted.response.status === 202 && !!submitted.data?.job_id, "submit", submitted.error ?? submitted.data);
const jobId = submitted.data!.job_id!;

const got = await client.GET("/v1/jobs/{job_id}", { params: { path: { job_id: jobId } } });
check(got.response.status === 200 && got.data?.job?.job_id === jobId, "get", got.error ?? got.data);

// The orchestrator creates the steps when it claims the job: wait for them.
let steps: components["schemas"]["lucius.v1.Step"][] = [];
for (let i = 0; i < 200 && steps.length === 0; i++) {
  const listed = await client.GET("/v1/jobs/{job_id}/steps", { params: { path: { job_id: jobId } } });
  check(listed.response.status === 200, "list steps", listed.error);
  steps = listed.data?.steps ?? [];
  if (steps.length === 0) await new Promise((r) => setTimeout(r, 100));
}
check(steps.length > 0, "steps", steps);

const cancelled = await client.POST("/v1/jobs/{job_id}:cancel", {
  params: { path: { job_id: jobId } },
  body: { reason: "the TypeScript client cancels it" },
});
check(cancelled.response.status === 200, "cancel", cancelled.error);

const missing = await client.GET("/v1/jobs/{job_id}", { params: { path: { job_id: "0".repeat(64) } } });
check(missing.response.status === 404, "get a missing job", missing.data);

console.log(
  JSON.stringify({
    job_id: jobId,
    submit_status: submitted.response.status,
    job_status: got.data?.job?.status,
    steps: steps.map((s) => s.step_id),
    cancel_status: cancelled.data?.job?.status,
    error_status: missing.response.status,
    error_reason: reason(missing.error),
  }),
);
