# Multi-stage build: static binaries, a minimal non-root runtime image.
# The same image runs the API (`api serve`, the default) and the payment
# provider simulator (`pspsim`), see docker-compose.yml.
# The patched Go of go.mod's toolchain line (docs/SECURITY.md).
FROM golang:1.26.10-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/api ./cmd/api \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/pspsim ./proving/cmd/pspsim

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/pspsim /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/api"]
CMD ["serve"]
