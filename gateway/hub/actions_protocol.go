package hub

import "github.com/proliferate/proliferate/internal/actions/invocations"

// Action invocation messages (actions.md §6.2–6.3, §7): the gateway tells a
// session's clients about every committed state change of its action
// invocations so people can approve or deny live.
const (
	// MsgActionApprovalRequest: an invocation is pending a person's approval.
	MsgActionApprovalRequest = "action_approval_request"
	// MsgActionCompleted: an invocation ran (status completed or failed).
	MsgActionCompleted = "action_completed"
	// MsgActionApprovalResult: a pending invocation was denied or expired.
	MsgActionApprovalResult = "action_approval_result"
)

// ActionApprovalRequestMessage announces a pending invocation.
type ActionApprovalRequestMessage struct {
	Type       string                 `json:"type"`
	Invocation invocations.Invocation `json:"invocation"`
}

// ActionCompletedMessage reports an executed invocation; Status is
// completed or failed.
type ActionCompletedMessage struct {
	Type       string                 `json:"type"`
	Invocation invocations.Invocation `json:"invocation"`
	Status     string                 `json:"status"`
}

// ActionApprovalResultMessage reports a pending invocation resolved
// without running: Status is denied or expired.
type ActionApprovalResultMessage struct {
	Type       string                 `json:"type"`
	Invocation invocations.Invocation `json:"invocation"`
	Status     string                 `json:"status"`
}
