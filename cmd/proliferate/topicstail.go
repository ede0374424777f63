package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/proliferate/proliferate/app"
	"github.com/proliferate/proliferate/schemas"
)

// topicsTail is `proliferate topics tail TOPIC [--from-beginning] [--json]`:
// it reads TOPIC (every partition, no consumer group, nothing committed)
// and prints each record decoded, with its headers, until interrupted.
func topicsTail(ctx context.Context, a *app.App, args []string, stdout io.Writer) error {
	opts, err := parseTail(args)
	if err != nil {
		return err
	}
	if err := a.OpenCodec(ctx); err != nil {
		return err
	}
	start := kgo.NewOffset().AtEnd()
	if opts.fromBeginning {
		start = kgo.NewOffset().AtStart()
	}
	cl, err := a.NewKafkaClient("tail", kgo.ConsumeTopics(opts.topic), kgo.ConsumeResetOffset(start))
	if err != nil {
		return err
	}
	return tailRecords(ctx, cl, a.Codec, opts.json, stdout)
}

type tailOptions struct {
	topic         string
	fromBeginning bool
	json          bool
}

const tailUsage = "usage: proliferate topics tail TOPIC [--from-beginning] [--json]"

func parseTail(args []string) (tailOptions, error) {
	var o tailOptions
	for _, a := range args {
		switch {
		case a == "--from-beginning":
			o.fromBeginning = true
		case a == "--json":
			o.json = true
		case strings.HasPrefix(a, "-"):
			return o, usageError{fmt.Sprintf("unknown flag %q; %s", a, tailUsage)}
		case o.topic != "":
			return o, usageError{"one topic at a time; " + tailUsage}
		default:
			o.topic = a
		}
	}
	if o.topic == "" {
		return o, usageError{tailUsage}
	}
	return o, nil
}

// tailRecords prints every record cl fetches until ctx ends: with asJSON
// one JSON object per line ({topic, partition, offset, timestamp, key,
// headers, event}, or value_base64 and decode_error for a record that does
// not decode), else one line per record for people.
func tailRecords(ctx context.Context, cl *kgo.Client, codec *schemas.Codec, asJSON bool, w io.Writer) error {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) {
			errs = append(errs, fmt.Errorf("fetch %s[%d]: %w", t, p, err))
		})
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		var werr error
		fs.EachRecord(func(r *kgo.Record) {
			if werr == nil {
				werr = writeRecord(w, codec, r, asJSON)
			}
		})
		if werr != nil {
			return werr
		}
	}
}

// TailLine is one record as `topics tail --json` prints it.
type TailLine struct {
	Topic       string            `json:"topic"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	Timestamp   time.Time         `json:"timestamp"`
	Key         string            `json:"key"`
	Headers     map[string]string `json:"headers"`
	Event       any               `json:"event,omitempty"`
	ValueBase64 []byte            `json:"value_base64,omitempty"`
	DecodeError string            `json:"decode_error,omitempty"`
}

func writeRecord(w io.Writer, codec *schemas.Codec, r *kgo.Record, asJSON bool) error {
	line := TailLine{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Key: string(r.Key),
		Headers: map[string]string{}}
	for _, h := range r.Headers {
		line.Headers[h.Key] = string(h.Value)
	}
	ev, err := codec.Decode(r.Value)
	if err != nil {
		line.ValueBase64, line.DecodeError = r.Value, err.Error()
	} else {
		line.Event = EventJSON(ev)
	}
	if asJSON {
		b, err := json.Marshal(line)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	body := ""
	if line.Event != nil {
		b, err := json.Marshal(line.Event)
		if err != nil {
			return err
		}
		body = string(b)
	} else {
		body = "(not decodable: " + line.DecodeError + ")"
	}
	hs := make([]string, 0, len(r.Headers))
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	_, err = fmt.Fprintf(w, "%s[%d]@%d %s key=%s headers=[%s] %s\n", r.Topic, r.Partition, r.Offset,
		line.Timestamp.Format(time.RFC3339Nano), line.Key, strings.Join(hs, " "), body)
	return err
}

// EventJSON is an event as JSON values named as in its Avro schema: the
// envelope fields, then payload. Timestamps are RFC 3339 strings in UTC,
// bytes base64, nulls null.
func EventJSON(ev *schemas.Event) map[string]any {
	out := map[string]any{}
	avroFields(reflect.ValueOf(ev.Envelope), out)
	out["payload"] = avroValue(reflect.ValueOf(ev.Payload))
	return out
}

func avroFields(v reflect.Value, out map[string]any) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if name := f.Tag.Get("avro"); name != "" {
			out[name] = avroValue(v.Field(i))
		}
	}
}

var timeType = reflect.TypeFor[time.Time]()

func avroValue(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Invalid:
		return nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return avroValue(v.Elem())
	case reflect.Struct:
		if v.Type() == timeType {
			return v.Interface().(time.Time).UTC().Format(time.RFC3339Nano)
		}
		m := map[string]any{}
		avroFields(v, m)
		return m
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Bytes() // base64 in JSON
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = avroValue(v.Index(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		iter := v.MapRange()
		for iter.Next() {
			out[iter.Key().String()] = avroValue(iter.Value())
		}
		return out
	}
	return v.Interface()
}
