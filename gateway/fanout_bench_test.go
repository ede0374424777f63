package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/proliferate/proliferate/api"
	"github.com/proliferate/proliferate/api/apitest"
	"github.com/proliferate/proliferate/api/identity"
	"github.com/proliferate/proliferate/gateway"
	"github.com/proliferate/proliferate/gateway/hub"
	"github.com/proliferate/proliferate/gateway/hub/agentsim"
	"github.com/proliferate/proliferate/gateway/hub/fanouttest"
	"github.com/proliferate/proliferate/gateway/protocol"
	"github.com/proliferate/proliferate/internal/auth"
	"github.com/proliferate/proliferate/internal/config"
	"github.com/proliferate/proliferate/internal/sessions"
	"github.com/proliferate/proliferate/internal/sessions/sessionstest"
	"github.com/proliferate/proliferate/schemas"
)

// fanoutGatewayEnv makes this test binary a gateway process of the
// multi-gateway fan-out benchmark instead of running tests.
const fanoutGatewayEnv = "PROLIFERATE_BENCH_GATEWAY"

func init() {
	if os.Getenv(fanoutGatewayEnv) == "" {
		return
	}
	if err := runBenchGateway(); err != nil {
		fmt.Fprintln(os.Stderr, "bench gateway:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runBenchGateway is one gateway process as the gateway role builds it
// (its own hub manager and instance id, its advertised address, the API's
// credential chain), with the simulated agent as its sandbox provider. It
// prints its address and serves until its standard input closes.
func runBenchGateway() error {
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	codec, err := schemas.NewCodec()
	if err != nil {
		return err
	}
	tokens, err := auth.NewTokens(cfg.AuthSigningKeys, cfg.AccessTokenTTL)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	apiSrv := api.New(api.Deps{Cfg: cfg, Log: log, Pool: pool, Redis: rdb, Tokens: tokens})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	u := "http://" + ln.Addr().String()
	prov := agentsim.NewProvider(agentsim.Options{TokenDelay: time.Millisecond})
	defer prov.Close()
	store := &sessions.Store{Pool: pool, Codec: codec}
	hubs := hub.NewManager(hub.Deps{Sessions: store, Provider: prov, Redis: rdb, InstanceID: "bench-" + uuid.NewString(),
		Log: log, GatewayURL: u, TokenBatch: 50 * time.Millisecond, MaxBufferedBytes: 4 << 20})
	srv, err := gateway.New(gateway.Deps{Cfg: cfg, Log: log, Pool: pool, Redis: rdb, Codec: codec, Hubs: hubs,
		Sessions: store, Authenticator: apiSrv.Authenticator(), AdvertiseURL: u, WSMaxBufferedBytes: 4 << 20})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler()}
	go func() { _ = hs.Serve(ln) }()
	fmt.Println(u)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hubs.Shutdown(sctx)
	srv.Close(sctx)
	return hs.Close()
}

// startBenchGateways starts n gateway processes (this test binary in
// gateway mode) on the test's Postgres and Redis and returns their
// addresses; they stop when the benchmark ends.
func startBenchGateways(b *testing.B, e *apitest.Env, n int) []string {
	b.Helper()
	urls := make([]string, n)
	for i := range urls {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fanoutGatewayEnv+"=1",
			"DATABASE_URL="+e.Deps.Cfg.DatabaseURL, "REDIS_URL="+e.Deps.Cfg.RedisURL, "LOG_LEVEL=error")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = stdin.Close()
			_ = cmd.Wait()
		})
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			b.Fatalf("gateway %d did not start: %v", i, err)
		}
		urls[i] = strings.TrimSpace(line)
	}
	return urls
}

const (
	spreadClients  = 10000
	spreadGateways = 3
)

// BenchmarkFanoutAcrossGateways streams a token stream of one session to
// 10,000 WebSocket clients spread evenly over three gateway processes
// (agentsim → SSE → the owner's hub → per-client queues → WS; a client of
// another gateway gets its frames through that gateway's one-hop forward
// to the owner). The clients, in this process, decode every frame as the
// dashboard does. baseline: the same stamped frames over Go channels to
// 10,000 goroutines.
func BenchmarkFanoutAcrossGateways(b *testing.B) {
	b.Run("gateways", func(b *testing.B) {
		e := apitest.New(b, apitest.Modules(identity.Register))
		owner := e.NewUser(b)
		sid := sessionstest.New(b, e.Deps.Pool, owner.OrgID, sessionstest.Options{CreatedBy: owner.ID})
		urls := startBenchGateways(b, e, spreadGateways)
		hdr := http.Header{"Authorization": {"Bearer " + owner.Token}}
		dialer := websocket.Dialer{HandshakeTimeout: time.Minute}
		complete := make(chan struct{}, spreadClients)
		readers := make([]*fanouttest.Reader, spreadClients)
		var first *websocket.Conn
		var wg sync.WaitGroup
		defer wg.Wait()
		// The first client makes the first gateway the owner; every client
		// is attached (has its init frame) before the stream starts.
		for i := range readers {
			u := "ws" + strings.TrimPrefix(urls[i%len(urls)], "http") + "/proliferate/" + sid
			ws, resp, err := dialer.Dial(u, hdr)
			if err != nil {
				b.Fatalf("dial %d (%v): %v", i, resp, err)
			}
			defer ws.Close()
			if _, _, err := ws.ReadMessage(); err != nil {
				b.Fatalf("client %d: no init frame: %v", i, err)
			}
			if i == 0 {
				first = ws
			}
			readers[i] = &fanouttest.Reader{}
			wg.Add(1)
			go func(r *fanouttest.Reader) {
				defer wg.Done()
				r.Read(ws, complete)
			}(readers[i])
		}
		prompt := fmt.Appendf(nil, `{"type":%q,"content":"[[stamped:%d]]"}`, protocol.ClientPrompt, fanoutTokens)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if err := first.WriteMessage(websocket.TextMessage, prompt); err != nil {
				b.Fatal(err)
			}
			for j := 0; j < spreadClients; j++ {
				<-complete
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		fanouttest.Report(b, readers, elapsed)
	})
	b.Run("baseline", func(b *testing.B) {
		fanouttest.Baseline(b, spreadClients, fanoutTokens, 50*time.Millisecond)
	})
}

const fanoutTokens = 400
