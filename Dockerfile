# Multi-stage build: static binaries, a minimal non-root runtime image.
# The same image runs the API (`api serve`, the default) and the payment
# provider simulator (`pspsim`), see docker-compose.yml.
# The patched Go of go.mod's toolchain line (docs/SECURITY.md).
FROM golang:1.26.10-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION is what `api version` prints and `api serve` logs. Empty, it is
# the git revision of the checkout the image is built from (the build
# context includes .git for that), "-dirty" with uncommitted changes; a
# checkout without its .git directory (a git worktree, a tarball) gives
# "unknown" unless VERSION is given.
ARG VERSION=
RUN version="${VERSION:-$(git -c safe.directory=/src describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)}" \
 && echo "building oncepay ${version}" \
 && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X main.buildVersion=${version}" -o /out/api ./cmd/api \
 && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/pspsim ./proving/cmd/pspsim

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/pspsim /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/api"]
CMD ["serve"]
