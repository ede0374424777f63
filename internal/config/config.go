// Package config is the one place where Proliferate reads its settings.
//
// Every setting is an environment variable with a development default, declared
// once as a tagged field of Config. Load parses and validates all of them and
// reports every problem at once, naming the variable and what is wrong with it,
// so a misconfigured deployment fails at start with a message an operator can act
// on instead of a panic deep inside a role.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config holds every setting of every role. Field tags:
//
//	env:"NAME"       the environment variable
//	default:"value"  the value used when the variable is unset or empty
//	check:"…"        extra validation (see validators below), comma separated
//	secret:"true"    redacted by Redacted and never logged
//	doc:"…"          one line for `proliferate config` and the README
type Config struct {
	Env       string `env:"PROLIFERATE_ENV" default:"development" check:"oneof=development|test|production" doc:"deployment environment; production refuses development-only defaults"`
	LogLevel  string `env:"LOG_LEVEL" default:"info" check:"oneof=debug|info|warn|error" doc:"minimum log level"`
	LogFormat string `env:"LOG_FORMAT" default:"text" check:"oneof=text|json" doc:"log encoding on stderr"`

	DatabaseURL      string `env:"DATABASE_URL" default:"postgres://proliferate@127.0.0.1:15432/proliferate?sslmode=disable" check:"url=postgres|postgresql" secret:"true" doc:"PostgreSQL connection URL (the password part is a secret)"`
	DatabaseMaxConns int    `env:"DATABASE_MAX_CONNS" default:"20" check:"min=1,max=1000" doc:"maximum connections in each role's pool"`
	RedisURL         string `env:"REDIS_URL" default:"redis://127.0.0.1:16379/0" check:"url=redis|rediss" secret:"true" doc:"Redis connection URL (the password part is a secret)"`

	KafkaBrokers           []string `env:"KAFKA_BROKERS" check:"hostports" doc:"comma-separated seed brokers; empty runs the embedded broker (dev) or fails (other roles)"`
	KafkaClientID          string   `env:"KAFKA_CLIENT_ID" default:"proliferate" check:"nonempty" doc:"client.id sent to the brokers"`
	KafkaReplicationFactor int      `env:"KAFKA_REPLICATION_FACTOR" default:"-1" check:"min=-1,max=32" doc:"replication factor for topics ensure; -1 uses the broker default"`
	SchemaRegistryURL      string   `env:"SCHEMA_REGISTRY_URL" check:"url=http|https" doc:"Confluent-compatible schema registry; empty uses Avro single-object encoding"`

	BrokerAddr              string        `env:"BROKER_ADDR" default:"127.0.0.1:9092" check:"hostport" doc:"listen address of the embedded broker (dev, broker)"`
	BrokerDataDir           string        `env:"BROKER_DATA_DIR" default:".data/kafka" check:"nonempty" doc:"data directory of the embedded broker; locked against a second process"`
	BrokerRetentionInterval time.Duration `env:"BROKER_RETENTION_INTERVAL" default:"1m" check:"positive" doc:"how often the embedded broker applies topic retention"`

	OpsAddr string `env:"OPS_ADDR" default:"127.0.0.1:9464" check:"hostport" doc:"listen address of /healthz, /readyz and /metrics"`

	ConsumerMaxAttempts    int           `env:"CONSUMER_MAX_ATTEMPTS" default:"5" check:"min=1,max=100" doc:"attempts per record before it goes to the group's dead-letter topic"`
	ConsumerBackoffInitial time.Duration `env:"CONSUMER_BACKOFF_INITIAL" default:"100ms" check:"positive" doc:"first retry delay; doubles per attempt"`
	ConsumerBackoffMax     time.Duration `env:"CONSUMER_BACKOFF_MAX" default:"10s" check:"positive" doc:"retry delay cap"`

	OutboxBatchSize    int           `env:"OUTBOX_BATCH_SIZE" default:"500" check:"min=1,max=10000" doc:"events the relay publishes per transaction"`
	OutboxLanes        int           `env:"OUTBOX_LANES" default:"16" check:"min=1,max=1024" doc:"ordering lanes (hash of key); each lane is relayed by one replica at a time"`
	OutboxPollInterval time.Duration `env:"OUTBOX_POLL_INTERVAL" default:"1s" check:"positive" doc:"fallback poll when no NOTIFY arrives"`
	OutboxRetention    time.Duration `env:"OUTBOX_RETENTION" default:"24h" check:"positive" doc:"how long published outbox rows are kept for inspection"`

	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" default:"20s" check:"positive" doc:"grace period for in-flight work on SIGINT/SIGTERM"`
}

// Error lists every invalid variable found by Load.
type Error struct {
	Problems []Problem
}

// Problem is one invalid variable.
type Problem struct {
	Var     string
	Value   string // already redacted for secrets
	Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid configuration:")
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %s=%q: %s", p.Var, p.Value, p.Message)
	}
	return b.String()
}

// Load reads the process environment.
func Load() (*Config, error) { return LoadFrom(os.LookupEnv) }

// LoadFrom reads settings through lookup (tests pass a map).
func LoadFrom(lookup func(string) (string, bool)) (*Config, error) {
	cfg := &Config{}
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	var problems []Problem
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("env")
		raw, ok := lookup(name)
		raw = strings.TrimSpace(raw)
		if !ok || raw == "" {
			raw = f.Tag.Get("default")
		}
		shown := raw
		if f.Tag.Get("secret") == "true" {
			shown = redactValue(raw)
		}
		if err := set(v.Field(i), raw); err != nil {
			problems = append(problems, Problem{name, shown, err.Error()})
			continue
		}
		if err := check(v.Field(i), raw, f.Tag.Get("check")); err != nil {
			problems = append(problems, Problem{name, shown, err.Error()})
		}
	}
	problems = append(problems, cfg.crossChecks()...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return cfg, nil
}

func (c *Config) crossChecks() []Problem {
	var ps []Problem
	if c.ConsumerBackoffMax < c.ConsumerBackoffInitial {
		ps = append(ps, Problem{"CONSUMER_BACKOFF_MAX", c.ConsumerBackoffMax.String(),
			fmt.Sprintf("must be at least CONSUMER_BACKOFF_INITIAL (%s)", c.ConsumerBackoffInitial)})
	}
	if c.Env == "production" && len(c.KafkaBrokers) == 0 {
		ps = append(ps, Problem{"KAFKA_BROKERS", "", "must be set when PROLIFERATE_ENV=production (the embedded broker is for development)"})
	}
	return ps
}

// Embedded reports whether the roles use the in-process broker.
func (c *Config) Embedded() bool { return len(c.KafkaBrokers) == 0 }

// Setting is one variable as shown by `proliferate config`.
type Setting struct {
	Var, Value, Default, Doc string
	Secret                   bool
}

// Settings lists every variable with its effective value, secrets redacted.
func (c *Config) Settings() []Setting {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	out := make([]Setting, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		s := Setting{Var: f.Tag.Get("env"), Default: f.Tag.Get("default"), Doc: f.Tag.Get("doc"), Secret: f.Tag.Get("secret") == "true"}
		s.Value = format(v.Field(i))
		if s.Secret {
			s.Value = redactValue(s.Value)
			s.Default = redactValue(s.Default)
		}
		out = append(out, s)
	}
	return out
}

// Documented lists every variable of Config with its default and doc, sorted by
// name; used to generate documentation.
func Documented() []Setting {
	t := reflect.TypeFor[Config]()
	out := make([]Setting, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		out = append(out, Setting{Var: f.Tag.Get("env"), Default: f.Tag.Get("default"), Doc: f.Tag.Get("doc"), Secret: f.Tag.Get("secret") == "true"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Var < out[j].Var })
	return out
}

func format(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case []string:
		return strings.Join(x, ",")
	case time.Duration:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

// redactValue hides the secret part of a value: a URL keeps its scheme, host
// and path but loses its password; anything else is replaced entirely.
func redactValue(s string) string {
	if s == "" {
		return ""
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
		return u.String()
	}
	return "REDACTED"
}

func set(f reflect.Value, raw string) error {
	switch f.Interface().(type) {
	case string:
		f.SetString(raw)
	case int:
		if raw == "" {
			return nil
		}
		n, err := strconv.Atoi(raw)
		if err != nil {
			return errors.New("must be an integer")
		}
		f.SetInt(int64(n))
	case time.Duration:
		if raw == "" {
			return nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			return errors.New(`must be a duration such as "500ms", "30s" or "5m"`)
		}
		f.SetInt(int64(d))
	case []string:
		var parts []string
		for p := range strings.SplitSeq(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		f.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported field type %s", f.Type())
	}
	return nil
}

func check(f reflect.Value, raw, spec string) error {
	if spec == "" {
		return nil
	}
	for rule := range strings.SplitSeq(spec, ",") {
		name, arg, _ := strings.Cut(rule, "=")
		if err := checkRule(f, raw, name, arg); err != nil {
			return err
		}
	}
	return nil
}

func checkRule(f reflect.Value, raw, name, arg string) error {
	switch name {
	case "nonempty":
		if raw == "" {
			return errors.New("must not be empty")
		}
	case "oneof":
		allowed := strings.Split(arg, "|")
		for _, a := range allowed {
			if raw == a {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
	case "min", "max":
		limit, _ := strconv.Atoi(arg)
		n := int(f.Int())
		if name == "min" && n < limit {
			return fmt.Errorf("must be at least %d", limit)
		}
		if name == "max" && n > limit {
			return fmt.Errorf("must be at most %d", limit)
		}
	case "positive":
		if f.Int() <= 0 {
			return errors.New("must be greater than zero")
		}
	case "hostport":
		return checkHostPort(raw)
	case "hostports":
		for _, hp := range f.Interface().([]string) {
			if err := checkHostPort(hp); err != nil {
				return fmt.Errorf("%q: %w", hp, err)
			}
		}
	case "url":
		if raw == "" {
			return nil // optional URLs are empty; required ones have defaults
		}
		u, err := url.Parse(raw)
		if err != nil {
			return errors.New("must be a URL")
		}
		schemes := strings.Split(arg, "|")
		ok := false
		for _, s := range schemes {
			ok = ok || u.Scheme == s
		}
		if !ok {
			return fmt.Errorf("must be a URL with scheme %s", strings.Join(schemes, " or "))
		}
		if u.Host == "" {
			return errors.New("must name a host")
		}
	default:
		return fmt.Errorf("unknown check %q (a bug in config.go)", name)
	}
	return nil
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New(`must be host:port, for example "127.0.0.1:9092"`)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return errors.New("port must be a number from 0 to 65535")
	}
	return nil
}

// Markdown renders docs/config.md: every variable with its default and doc.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# Configuration\n\n<!-- Generated from internal/config/config.go by 'proliferate config --markdown' (make docs). Do not edit. -->\n\n")
	b.WriteString("Every setting is an environment variable. Defaults suit `make run` on one machine; `proliferate config` prints the effective values with secrets redacted. Invalid values stop a role at start with one line per problem.\n\n")
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, s := range Documented() {
		def := s.Default
		if def == "" {
			def = "(empty)"
		}
		doc := s.Doc
		if s.Secret {
			doc += " **Secret:** never logged; redacted by `proliferate config`."
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", s.Var, def, doc)
	}
	return b.String()
}
