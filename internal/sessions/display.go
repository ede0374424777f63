package sessions

import "time"

// Pause reasons with a meaning for display.
const (
	PauseInactivity    = "inactivity"
	PauseCreditLimit   = "credit_limit"
	PausePaymentFailed = "payment_failed"
	PauseOverageCap    = "overage_cap"
	PauseOrphaned      = "orphaned"
	// PauseOrgDeletion: the organization is scheduled for deletion
	// (orgs.PauseReasonDeletion); resumable once an owner restores it.
	PauseOrgDeletion = "org_deletion"
)

// DisplayStatus derives the display status:
//
//	starting | running  → active (idle when the agent is known not busy)
//	paused, inactivity  → idle (sleeping; resumes on reconnect)
//	paused, no reason   → paused (a person paused it)
//	paused, billing     → blocked (credit_limit, payment_failed, overage_cap;
//	                      org_deletion: the organization is being deleted)
//	paused, orphaned    → recovering
//	stopped             → completed (failed when its outcome is failed)
//	failed              → failed
//
// agentBusy is the live agent state when known (nil: unknown); now is
// reserved for time-based rules and keeps the function pure.
func DisplayStatus(s Session, agentBusy *bool, now time.Time) string {
	_ = now
	switch s.Status {
	case StatusStarting:
		return DisplayActive
	case StatusRunning:
		if agentBusy != nil && !*agentBusy {
			return DisplayIdle
		}
		return DisplayActive
	case StatusPaused:
		if s.PauseReason == nil {
			return DisplayPaused
		}
		switch *s.PauseReason {
		case PauseInactivity:
			return DisplayIdle
		case PauseCreditLimit, PausePaymentFailed, PauseOverageCap, PauseOrgDeletion:
			return DisplayBlocked
		case PauseOrphaned:
			return DisplayRecovering
		default:
			return DisplayPaused
		}
	case StatusStopped:
		if s.Outcome != nil && *s.Outcome == "failed" {
			return DisplayFailed
		}
		return DisplayCompleted
	default:
		return DisplayFailed
	}
}
