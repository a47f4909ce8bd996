# syntax=docker/dockerfile:1
# One multi-stage build for each schedloop binary:
#   docker build --build-arg CMD=collector -t schedloop/collector .
#   docker build --build-arg CMD=tuner     -t schedloop/tuner .
#   docker build --build-arg CMD=scheduler -t schedloop/scheduler .
# go-dcgm needs cgo, so the build stage has a C toolchain and the runtime
# image keeps glibc (distroless/base: glibc, CA certificates, tzdata, no
# shell, user nonroot). Each image carries its binary and /usr/local/bin/probe,
# the HTTP check docker compose health checks run (there is no curl).
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
ARG CMD=collector
# kube-scheduler reports this version instead of v0.0.0-master (see the
# Makefile's SCHED_LDFLAGS).
ARG K8S_VERSION=v1.37.2
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    set -eu; \
    case "${CMD}" in collector|tuner|scheduler) ;; *) echo "CMD must be collector, tuner or scheduler, not ${CMD}" >&2; exit 1 ;; esac; \
    ldflags="-s -w"; \
    if [ "${CMD}" = scheduler ]; then \
      minor=$(echo "${K8S_VERSION}" | cut -d. -f2); \
      ldflags="${ldflags} -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"; \
    fi; \
    CGO_ENABLED=1 go build -trimpath -ldflags "${ldflags}" -o /out/app "./cmd/${CMD}"; \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/probe ./deploy/probe; \
    mkdir -p /out/spool

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/app /usr/local/bin/app
COPY --from=build /out/probe /usr/local/bin/probe
# The collector's -spool-dir; a volume mounted here inherits the ownership.
COPY --from=build --chown=65532:65532 /out/spool /var/spool/schedloop
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/app"]
