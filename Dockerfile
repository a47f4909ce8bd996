# One multi-stage build for every schedloop binary:
#   docker build --build-arg CMD=collector -t schedloop/collector .
# go-dcgm needs cgo, so the build stage has a C toolchain and the runtime
# image keeps glibc (distroless/base, not static).
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION}-bookworm AS build
ARG CMD=collector
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build BIN=/out && cp /out/${CMD} /out/app

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/app /usr/local/bin/app
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/app"]
