package worker

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"path"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// DefaultInlineOutputLimit is the default Config.InlineOutputLimit: the
// orchestrator's default limit on a RESULT's output (protojson bytes), over
// which it would fail the step OUTPUT_TOO_LARGE.
const DefaultInlineOutputLimit = 256 << 10

// Spilled output: an output over the inline limit is written whole to the
// step's directory as SpilledOutputFile and reported as an artifact named
// SpilledOutputArtifact; the RESULT's output is then only the claim check
// {"spilled_output": {"uri", "size_bytes", "sha256", "media_type"}}.
const (
	SpilledOutputArtifact = "spilled_output"
	SpilledOutputFile     = "spilled-output.json"
	SpilledOutputKey      = "spilled_output"
)

// writeFinalOutput copies the content of the step's first artifact to the
// job's output_ref (any writable scheme; a ref ending with "/" receives the
// artifact's file name) and returns an ArtifactRef named "output" for it,
// with the size and SHA-256 of what was written.
func (t *Task) writeFinalOutput(ctx context.Context, outputRef string, first *luciusv1.ArtifactRef) (*luciusv1.ArtifactRef, error) {
	src, err := t.OpenRef(ctx, first.GetUri())
	if err != nil {
		return nil, fmt.Errorf("open artifact %s: %w", first.GetName(), err)
	}
	defer src.Close()
	out, err := t.WriteRef(ctx, "output", blob.JoinRef(outputRef, refBase(first.GetUri())), first.GetMediaType(), src)
	if err != nil {
		return nil, fmt.Errorf("final output: %w", err)
	}
	if first.GetSha256() != "" && out.GetSha256() != first.GetSha256() {
		return nil, fmt.Errorf("final output: artifact %s changed since it was written (sha256 %s, want %s)",
			first.GetName(), out.GetSha256(), first.GetSha256())
	}
	return out, nil
}

// refBase is the last path segment of a ref ("output" when it has none).
func refBase(ref string) string {
	if p, err := blob.LocalPath(ref); err == nil {
		return filepath.Base(p)
	}
	if u, err := url.Parse(ref); err == nil && path.Base(u.Path) != "/" && path.Base(u.Path) != "." {
		return path.Base(u.Path)
	}
	return "output"
}

// spillOutput returns output as the RESULT carries it: itself when its
// protojson encoding fits in limit bytes; else the claim check pointing at
// the whole output, written to the step's directory, plus that artifact.
func (t *Task) spillOutput(ctx context.Context, output *structpb.Struct, limit int) (*structpb.Struct, *luciusv1.ArtifactRef, error) {
	encoded, err := protojson.Marshal(output)
	if err != nil {
		return nil, nil, PermanentCode(CodeInvalidResult, fmt.Errorf("output: %w", err))
	}
	if len(encoded) <= limit {
		return output, nil, nil
	}
	ref, err := t.WriteRef(ctx, SpilledOutputArtifact, t.artifactRef(SpilledOutputFile), "application/json", bytes.NewReader(encoded))
	if err != nil {
		return nil, nil, fmt.Errorf("spill the %d-byte output: %w", len(encoded), err)
	}
	claim, err := structpb.NewStruct(map[string]any{SpilledOutputKey: map[string]any{
		"uri": ref.GetUri(), "size_bytes": ref.GetSizeBytes(), "sha256": ref.GetSha256(), "media_type": ref.GetMediaType(),
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("spill output: %w", err)
	}
	t.log.InfoContext(ctx, "output over the inline limit spilled to the workspace", "size_bytes", len(encoded), "limit", limit, "uri", ref.GetUri())
	return claim, ref, nil
}
