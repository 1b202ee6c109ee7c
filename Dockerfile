# syntax=docker/dockerfile:1.7
# One image holds every Lucius binary; docker-compose.yml and the Helm chart
# (deploy/helm/lucius) pick the command:
#
#   gateway | orchestrator | reconciler | scheduler   the services
#   orchestrator migrate                              the schema, once per release
#   worker                                            the example worker pools
#   lucius                                            the command line
#
# Every service answers `<binary> healthcheck` (exit 0 when its /healthz
# answers on its own HTTP address): the image has no shell or curl, so
# docker-compose.yml sets each service's HEALTHCHECK to that; one image
# runs several commands, so none is set here. Kubernetes probes /healthz and
# /readyz directly. deploy/check's image test keeps this file building
# every binary `make build` ships.
#
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) -t lucius:0.1.0 .

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
# Modules first: a change to the code reuses the downloaded dependencies.
COPY go.work go.work.sum ./
COPY base/go.mod base/go.sum base/
COPY bus/go.mod bus/go.sum bus/
COPY contract/go.mod contract/go.sum contract/
COPY core/go.mod core/go.sum core/
COPY sdk/worker/go.mod sdk/worker/go.sum sdk/worker/
COPY services/gateway/go.mod services/gateway/go.sum services/gateway/
COPY services/orchestrator/go.mod services/orchestrator/go.sum services/orchestrator/
COPY services/reconciler/go.mod services/reconciler/go.sum services/reconciler/
COPY services/scheduler/go.mod services/scheduler/go.sum services/scheduler/
COPY services/worker-skeleton/go.mod services/worker-skeleton/go.sum services/worker-skeleton/
COPY tools/go.mod tools/go.sum tools/
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# Static binaries (no cgo: distroless/static has no C library).
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; mkdir -p /out /workspace /var/lib/lucius; \
    for s in gateway orchestrator reconciler scheduler; do \
        go build -ldflags "-s -w" -o /out/$s ./services/$s/cmd/$s; \
    done; \
    go build -ldflags "-s -w" -o /out/worker ./services/worker-skeleton/cmd/worker; \
    go build -ldflags "-s -w" -o /out/lucius ./tools/cmd/lucius

# distroless/static: CA certificates, tzdata, /etc/passwd with nonroot
# (65532), and nothing else: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="lucius" \
      org.opencontainers.image.description="Lucius: gateway, orchestrator, reconciler, scheduler, example workers and CLI in one image" \
      org.opencontainers.image.source="https://github.com/lucius-platform/lucius" \
      org.opencontainers.image.url="https://github.com/lucius-platform/lucius" \
      org.opencontainers.image.documentation="https://github.com/lucius-platform/lucius#deploy-to-kubernetes--azure" \
      org.opencontainers.image.vendor="lucius-platform" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /out/ /usr/local/bin/
# The file:// workspace and the trust folder (`lucius trust`) docker-compose.yml
# mounts volumes on; a new volume takes its folder's owner.
COPY --from=build --chown=65532:65532 /workspace /workspace
COPY --from=build --chown=65532:65532 /var/lib/lucius /var/lib/lucius
USER 65532:65532
