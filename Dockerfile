# One image holds every Lucius binary; docker-compose.yml picks the command.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; mkdir -p /out; \
    for s in gateway orchestrator reconciler scheduler; do go build -o /out/$s ./services/$s/cmd/$s; done; \
    go build -o /out/worker ./services/worker-skeleton/cmd/worker

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 lucius && mkdir -p /workspace && chown lucius /workspace
COPY --from=build /out/ /usr/local/bin/
USER lucius
