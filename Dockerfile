# The one image every proliferate role runs from (see docker-compose.yml).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/proliferate ./cmd/proliferate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/proliferate /usr/local/bin/proliferate
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/proliferate"]
