package outbox

import "context"

// SetAfterPublish installs a hook between publishing and marking a batch.
func (r *Relay) SetAfterPublish(f func(ctx context.Context, n int) error) { r.afterPublish = f }
