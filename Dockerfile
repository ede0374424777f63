# The images every proliferate role runs from (see docker-compose.yml): a
# static one for every role, and one for the gateway with git, Node.js and the
# pinned coding agent (the local sandbox provider runs it per session, in a
# bubblewrap sandbox: SANDBOX_ISOLATION=bwrap needs user namespaces in the
# container).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/proliferate ./cmd/proliferate

FROM debian:bookworm-slim AS gateway
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates git nodejs npm bubblewrap socat \
    && rm -rf /var/lib/apt/lists/* && useradd --create-home --uid 10001 proliferate
COPY scripts/opencode.sh /opt/proliferate/scripts/opencode.sh
ENV PROLIFERATE_TOOLS_DIR=/opt/proliferate/tools
RUN /opt/proliferate/scripts/opencode.sh install && chown -R proliferate /opt/proliferate/tools
ENV PROLIFERATE_OPENCODE_SCRIPT=/opt/proliferate/scripts/opencode.sh
COPY --from=build /out/proliferate /usr/local/bin/proliferate
USER proliferate
ENTRYPOINT ["/usr/local/bin/proliferate"]

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/proliferate /usr/local/bin/proliferate
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/proliferate"]
