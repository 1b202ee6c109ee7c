package main

import (
	"context"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

func configCommand(s *session) *cobra.Command {
	cfg := &cobra.Command{Use: "config", Short: "Read and change the live configuration (operators)"}
	var tenant, file string
	// A configuration is nested: tables show it as YAML.
	show := func(cmd *cobra.Command, msg proto.Message) error {
		p := s.printer(cmd)
		if p.format == formatTable {
			p.format = formatYAML
		}
		return p.print(msg, func(*tabwriter.Writer) {})
	}
	get := &cobra.Command{
		Use: "get [--tenant T]", Short: "Show the global configuration, or a tenant's overrides and effective settings", Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				client := luciusv1.NewConfigServiceClient(conn)
				if tenant == "" {
					resp, err := client.GetGlobalConfig(ctx, &luciusv1.GetGlobalConfigRequest{})
					if err != nil {
						return err
					}
					return show(cmd, resp)
				}
				resp, err := client.GetTenantConfig(ctx, &luciusv1.GetTenantConfigRequest{TenantId: tenant})
				if err != nil {
					return err
				}
				return show(cmd, resp)
			})
		},
	}
	get.Flags().StringVar(&tenant, "tenant", "", "a tenant's configuration")
	set := &cobra.Command{
		Use:   "set -f FILE [--tenant T]",
		Short: "Replace the global configuration, or a tenant's overrides, with a JSON or YAML file",
		Long: `Replace the global configuration (or with --tenant a tenant's overrides) with
the file's, field names as in the API. Put the revision you read (config get)
in the global file to refuse the change if someone changed it meanwhile
(CONFIG_REVISION_MISMATCH).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("config set needs -f FILE")
			}
			var msg proto.Message = &luciusv1.GlobalConfig{}
			if tenant != "" {
				msg = &luciusv1.TenantConfig{}
			}
			if err := readMessage(file, msg); err != nil {
				return &codedError{code: exitUsage, err: err}
			}
			return s.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				client := luciusv1.NewConfigServiceClient(conn)
				if tenant == "" {
					resp, err := client.UpdateGlobalConfig(ctx, &luciusv1.UpdateGlobalConfigRequest{Config: msg.(*luciusv1.GlobalConfig)})
					if err != nil {
						return err
					}
					return show(cmd, resp)
				}
				tc := msg.(*luciusv1.TenantConfig)
				tc.TenantId = tenant
				resp, err := client.UpdateTenantConfig(ctx, &luciusv1.UpdateTenantConfigRequest{Config: tc})
				if err != nil {
					return err
				}
				return show(cmd, resp)
			})
		},
	}
	set.Flags().StringVar(&tenant, "tenant", "", "set this tenant's overrides")
	set.Flags().StringVarP(&file, "file", "f", "", "the configuration as JSON or YAML")
	cfg.AddCommand(get, set)
	return cfg
}
