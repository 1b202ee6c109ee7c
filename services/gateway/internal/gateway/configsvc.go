package gateway

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/lucius-platform/lucius/base/server"
	"github.com/lucius-platform/lucius/base/telemetry"
	"github.com/lucius-platform/lucius/bus/routing"
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/core/apistatus"
	"github.com/lucius-platform/lucius/core/config"
)

// configService implements lucius.v1.ConfigService over the config store.
// After a change it reloads this process's copy at once; every other process
// hears of it through its config.Watcher.
type configService struct {
	luciusv1.UnimplementedConfigServiceServer
	watcher *config.Watcher
	log     *slog.Logger
}

var _ luciusv1.ConfigServiceServer = (*configService)(nil)

func (s *configService) GetGlobalConfig(ctx context.Context, _ *luciusv1.GetGlobalConfigRequest) (*luciusv1.GetGlobalConfigResponse, error) {
	g, err := s.watcher.Store().Global(ctx)
	if err != nil {
		return nil, s.error(ctx, err, "")
	}
	return &luciusv1.GetGlobalConfigResponse{Config: globalToProto(g)}, nil
}

func (s *configService) UpdateGlobalConfig(ctx context.Context, req *luciusv1.UpdateGlobalConfigRequest) (*luciusv1.UpdateGlobalConfigResponse, error) {
	in := req.GetConfig()
	g := globalFromProto(in)
	g.UpdatedBy = principalName(ctx)
	g, err := s.watcher.Store().PutGlobal(ctx, g, in.GetRevision())
	if err != nil {
		return nil, s.error(ctx, err, "")
	}
	s.changed(ctx, "global configuration updated", "revision", g.Revision)
	return &luciusv1.UpdateGlobalConfigResponse{Config: globalToProto(g)}, nil
}

func (s *configService) GetTenantConfig(ctx context.Context, req *luciusv1.GetTenantConfigRequest) (*luciusv1.GetTenantConfigResponse, error) {
	t, err := s.watcher.Store().Tenant(ctx, req.GetTenantId())
	if err != nil {
		return nil, s.error(ctx, err, req.GetTenantId())
	}
	snap, err := s.watcher.Store().Load(ctx)
	if err != nil {
		return nil, s.error(ctx, err, req.GetTenantId())
	}
	return &luciusv1.GetTenantConfigResponse{Config: tenantToProto(t), Effective: effectiveToProto(snap.For(t.TenantID))}, nil
}

func (s *configService) ListTenantConfigs(ctx context.Context, req *luciusv1.ListTenantConfigsRequest) (*luciusv1.ListTenantConfigsResponse, error) {
	size := pageSize(req, 100)
	after, err := decodeKeyToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	list, err := s.watcher.Store().ListTenants(ctx, after, size+1)
	if err != nil {
		return nil, s.error(ctx, err, "")
	}
	resp := &luciusv1.ListTenantConfigsResponse{}
	list, resp.NextPageToken = cutPage(list, size, func(last config.Tenant) string { return encodeToken(last.TenantID) })
	for _, t := range list {
		resp.Configs = append(resp.Configs, tenantToProto(t))
	}
	return resp, nil
}

func (s *configService) UpdateTenantConfig(ctx context.Context, req *luciusv1.UpdateTenantConfigRequest) (*luciusv1.UpdateTenantConfigResponse, error) {
	in := req.GetConfig()
	t := tenantFromProto(in)
	if t.TenantID == "" {
		return nil, server.InvalidArgument(server.Violation{Field: "config.tenant_id", Reason: luciusv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT,
			Description: "must not be blank"}).Err()
	}
	if t.Mode != "" && len(t.AllowedModes) > 0 && !slices.Contains(t.AllowedModes, t.Mode) {
		return nil, server.InvalidArgument(server.Violation{Field: "config.mode", Reason: luciusv1.ErrorReason_ERROR_REASON_MODE_FORBIDDEN,
			Description: "is not one of allowed_modes"}).Err()
	}
	t.UpdatedBy = principalName(ctx)
	stored, err := s.watcher.Store().PutTenant(ctx, t, in.GetRevision())
	if err != nil {
		return nil, s.error(ctx, err, t.TenantID)
	}
	s.changed(ctx, "tenant configuration updated", telemetry.TenantID(stored.TenantID), "revision", stored.Revision)
	return &luciusv1.UpdateTenantConfigResponse{Config: tenantToProto(stored)}, nil
}

func (s *configService) DeleteTenantConfig(ctx context.Context, req *luciusv1.DeleteTenantConfigRequest) (*luciusv1.DeleteTenantConfigResponse, error) {
	if err := s.watcher.Store().DeleteTenant(ctx, req.GetTenantId(), principalName(ctx)); err != nil {
		return nil, s.error(ctx, err, req.GetTenantId())
	}
	s.changed(ctx, "tenant configuration deleted", telemetry.TenantID(routing.Normalize(req.GetTenantId())))
	return &luciusv1.DeleteTenantConfigResponse{}, nil
}

// changed logs a change and applies it here at once.
func (s *configService) changed(ctx context.Context, msg string, attrs ...any) {
	s.log.InfoContext(ctx, msg, append(attrs, "principal", principalName(ctx))...)
	if err := s.watcher.Reload(ctx); err != nil {
		s.log.WarnContext(ctx, "reload configuration", telemetry.Err(err))
	}
}

// error maps configuration store errors to API statuses through apiError, naming the tenant.
func (s *configService) error(ctx context.Context, err error, tenant string) error {
	t := routing.Normalize(tenant)
	return apiError(ctx, s.log, "configuration store", "configuration store", err,
		&apistatus.NotFound{Reason: luciusv1.ErrorReason_ERROR_REASON_TENANT_CONFIG_NOT_FOUND,
			Message: "tenant " + t + " has no configuration of its own", Metadata: []string{"tenant_id", t}})
}

func modeFromProto(m luciusv1.Mode) routing.Mode {
	switch m {
	case luciusv1.Mode_MODE_DEFAULT:
		return routing.ModeDefault
	case luciusv1.Mode_MODE_BURST:
		return routing.ModeBurst
	}
	return ""
}

func modeToProto(m routing.Mode) luciusv1.Mode {
	switch m {
	case routing.ModeDefault:
		return luciusv1.Mode_MODE_DEFAULT
	case routing.ModeBurst:
		return luciusv1.Mode_MODE_BURST
	}
	return luciusv1.Mode_MODE_UNSPECIFIED
}

func refsFromProto(p *luciusv1.RefPolicy) config.RefPolicy {
	return config.RefPolicy{Schemes: p.GetSchemes(), Hosts: p.GetHosts(), Containers: p.GetContainers()}
}

func refsToProto(p config.RefPolicy) *luciusv1.RefPolicy {
	return &luciusv1.RefPolicy{Schemes: p.Schemes, Hosts: p.Hosts, Containers: p.Containers}
}

func globalFromProto(p *luciusv1.GlobalConfig) config.Global {
	l := p.GetLimits()
	g := config.Global{DefaultMode: modeFromProto(p.GetDefaultMode()), Refs: refsFromProto(p.GetRefPolicy()),
		RetryAfter: time.Duration(p.GetRetryAfterSeconds()) * time.Second, RetentionDays: int(p.GetRetentionDays()),
		Limits: config.Limits{Global: int(l.GetGlobalMaxActiveJobs()), Tenant: int(l.GetTenantMaxActiveJobs())}}
	for mode, n := range map[routing.Mode]int32{routing.ModeDefault: l.GetDefaultLaneMaxActiveJobs(), routing.ModeBurst: l.GetBurstLaneMaxActiveJobs()} {
		if n > 0 {
			if g.Limits.Lanes == nil {
				g.Limits.Lanes = map[routing.Mode]int{}
			}
			g.Limits.Lanes[mode] = int(n)
		}
	}
	return g
}

func globalToProto(g config.Global) *luciusv1.GlobalConfig {
	return &luciusv1.GlobalConfig{DefaultMode: modeToProto(g.DefaultMode), RefPolicy: refsToProto(g.Refs),
		RetryAfterSeconds: int32(g.RetryAfter / time.Second), Revision: g.Revision, UpdateTime: ts(g.UpdatedAt),
		UpdatedBy: g.UpdatedBy, RetentionDays: int32(g.RetentionDays),
		Limits: &luciusv1.AdmissionLimits{GlobalMaxActiveJobs: int32(g.Limits.Global), TenantMaxActiveJobs: int32(g.Limits.Tenant),
			DefaultLaneMaxActiveJobs: int32(g.Limits.Lanes[routing.ModeDefault]), BurstLaneMaxActiveJobs: int32(g.Limits.Lanes[routing.ModeBurst])}}
}

func tenantFromProto(p *luciusv1.TenantConfig) config.Tenant {
	t := config.Tenant{TenantID: routing.Normalize(p.GetTenantId()), Mode: modeFromProto(p.GetMode())}
	if p.MaxActiveJobs != nil {
		n := int(p.GetMaxActiveJobs())
		t.MaxActive = &n
	}
	for _, m := range p.GetAllowedModes() {
		t.AllowedModes = append(t.AllowedModes, modeFromProto(m))
	}
	if p.GetRefPolicy() != nil {
		refs := refsFromProto(p.GetRefPolicy())
		t.Refs = &refs
	}
	t.WebhookSecrets = p.GetWebhookSecrets()
	if p.GetRequestRate() != nil {
		r := rateFromProto(p.GetRequestRate())
		t.RequestRate = &r
	}
	for _, k := range p.GetKeyRateLimits() {
		t.KeyRateLimits = append(t.KeyRateLimits, config.KeyRateLimit{Field: k.GetField(), Rate: rateFromProto(k.GetRate())})
	}
	if p.RetentionDays != nil {
		n := int(p.GetRetentionDays())
		t.RetentionDays = &n
	}
	return t
}

func rateFromProto(r *luciusv1.RateLimit) config.RateLimit {
	return config.RateLimit{RequestsPerSecond: r.GetRequestsPerSecond(), Burst: int(r.GetBurst())}
}

func rateToProto(r config.RateLimit) *luciusv1.RateLimit {
	return &luciusv1.RateLimit{RequestsPerSecond: r.RequestsPerSecond, Burst: int32(r.Burst)}
}

func tenantToProto(t config.Tenant) *luciusv1.TenantConfig {
	out := &luciusv1.TenantConfig{TenantId: t.TenantID, Mode: modeToProto(t.Mode), Revision: t.Revision, UpdateTime: ts(t.UpdatedAt),
		UpdatedBy: t.UpdatedBy}
	if t.MaxActive != nil {
		n := int32(*t.MaxActive)
		out.MaxActiveJobs = &n
	}
	for _, m := range t.AllowedModes {
		out.AllowedModes = append(out.AllowedModes, modeToProto(m))
	}
	if t.Refs != nil {
		out.RefPolicy = refsToProto(*t.Refs)
	}
	out.WebhookSecrets = t.WebhookSecrets
	if t.RequestRate != nil {
		out.RequestRate = rateToProto(*t.RequestRate)
	}
	for _, k := range t.KeyRateLimits {
		out.KeyRateLimits = append(out.KeyRateLimits, &luciusv1.KeyRateLimit{Field: k.Field, Rate: rateToProto(k.Rate)})
	}
	if t.RetentionDays != nil {
		n := int32(*t.RetentionDays)
		out.RetentionDays = &n
	}
	return out
}

func effectiveToProto(e config.Effective) *luciusv1.EffectiveConfig {
	out := &luciusv1.EffectiveConfig{Mode: modeToProto(e.Mode), ModeSource: string(routing.SourceTenantConfig),
		MaxActiveJobs: int32(e.MaxActive), RefPolicy: refsToProto(e.Refs), RetentionDays: int32(e.RetentionDays)}
	if e.Mode == "" {
		out.Mode, out.ModeSource = modeToProto(e.GlobalMode), string(routing.SourceGlobalConfig)
		if e.GlobalMode == "" {
			out.Mode = luciusv1.Mode_MODE_DEFAULT
		}
	}
	for _, m := range e.AllowedModes {
		out.AllowedModes = append(out.AllowedModes, modeToProto(m))
	}
	return out
}
