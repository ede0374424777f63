package topics

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Report is the outcome of Ensure.
type Report struct {
	Created  []string
	Existing []string
	Drift    []Drift
}

// Drift is a difference between the catalog and an existing topic. Ensure never
// changes an existing topic: fewer partitions cannot be restored, and adding
// partitions silently moves keys to other partitions (breaking per-key order),
// so drift is reported for an operator to decide.
type Drift struct {
	Topic   string
	Setting string
	Want    string
	Have    string
}

func (d Drift) String() string {
	return fmt.Sprintf("%s: %s is %s, catalog says %s", d.Topic, d.Setting, d.Have, d.Want)
}

// Configs are the topic-level Kafka configs the catalog sets for t.
func (t Topic) Configs() map[string]*string {
	retention := strconv.FormatInt(t.Retention.Milliseconds(), 10)
	if t.Retention == Forever {
		retention = "-1"
	}
	cleanup := t.Cleanup
	return map[string]*string{
		"cleanup.policy": &cleanup,
		"retention.ms":   &retention,
	}
}

// Ensure creates every catalog topic that is missing and reports drift in the
// ones that exist. replicationFactor -1 uses the broker default.
func Ensure(ctx context.Context, adm *kadm.Client, replicationFactor int16) (Report, error) {
	var rep Report
	all := All()
	names := make([]string, len(all))
	for i, t := range all {
		names[i] = t.Name
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return rep, fmt.Errorf("list topics: %w", err)
	}
	var existing []string
	for _, t := range all {
		d, ok := details[t.Name]
		if ok && d.Err == nil {
			existing = append(existing, t.Name)
			rep.Existing = append(rep.Existing, t.Name)
			if have := int32(len(d.Partitions)); have != t.Partitions {
				rep.Drift = append(rep.Drift, Drift{t.Name, "partitions", strconv.Itoa(int(t.Partitions)), strconv.Itoa(int(have))})
			}
			continue
		}
		resp, err := adm.CreateTopic(ctx, t.Partitions, replicationFactor, t.Configs(), t.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Another replica running ensure won the race (or the client's
			// metadata cache was stale): it exists; check its configs.
			existing = append(existing, t.Name)
			rep.Existing = append(rep.Existing, t.Name)
		case err != nil:
			return rep, fmt.Errorf("create topic %s: %w", t.Name, err)
		default:
			rep.Created = append(rep.Created, t.Name)
		}
	}
	if len(existing) == 0 {
		return rep, nil
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return rep, fmt.Errorf("describe topic configs: %w", err)
	}
	for _, rc := range cfgs {
		t, _ := Lookup(rc.Name)
		if rc.Err != nil {
			return rep, fmt.Errorf("describe configs of %s: %w", rc.Name, rc.Err)
		}
		have := map[string]string{}
		for _, c := range rc.Configs {
			have[c.Key] = c.MaybeValue()
		}
		for k, want := range t.Configs() {
			if h, ok := have[k]; ok && h != *want {
				rep.Drift = append(rep.Drift, Drift{t.Name, k, *want, h})
			}
		}
	}
	return rep, nil
}
