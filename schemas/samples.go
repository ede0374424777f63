package schemas

import (
	"fmt"
	"time"
)

// SampleEvents returns one fully populated event per event type, in Types()
// order. Every optional field is set, even those that would normally be
// absent for the sample's status (an error on a completed call), so that
// fixtures exercise every field. Other packages' tests use them as
// realistic fixtures; each call returns fresh values that callers may modify.
// Times are UTC and whole milliseconds, so a sample equals its decoded copy.
func SampleEvents() []*Event {
	base := time.Date(2025, 3, 14, 9, 26, 53, 589_000_000, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	ptr := func(s string) *string { return &s }
	tp := func(t time.Time) *time.Time { return &t }
	i64 := func(i int64) *int64 { return &i }

	const (
		org     = "org_2bX9kQm4"
		session = "0195a3c2-7e41-7c3a-9b1d-5f0e8a2c4d61"
		run     = "0195a3c2-6d10-7f02-8e44-1a2b3c4d5e6f"
		autom   = "9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f"
		trigger = "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"
		tevent  = "0195a3c2-5c00-7a11-b222-333344445555"
		integr  = "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f"
		webhook = "0195a3c2-4b00-7000-8000-00000000a001"
		corr    = "0195a3c2-4b00-7000-8000-00000000c0de"
		trace   = "4bf92f3577b34da6a3ce929d0e0e4736"
	)

	body := []byte(`{"action":"opened","issue":{"number":42,"title":"Crash on empty config","html_url":"https://github.com/acme/api/issues/42"},"repository":{"full_name":"acme/api"}}`)

	payloads := []Payload{
		&ActionInvocation{
			InvocationID:   "0195a3c3-0a00-7b00-8c00-0000000000a1",
			SessionID:      session,
			Integration:    "linear",
			IntegrationID:  ptr(integr),
			Action:         "create_issue",
			RiskLevel:      RiskWrite,
			Mode:           ModeRequireApproval,
			ModeSource:     ptr("org_default"),
			Status:         ActionCompleted,
			PreviousStatus: ptr(ActionExecuting),
			ParamsJSON:     ptr(`{"teamId":"ENG","title":"Crash on empty config"}`),
			ResultJSON:     ptr(`{"id":"ENG-512","url":"https://linear.app/acme/issue/ENG-512"}`),
			Error:          ptr("first attempt: linear: 502 Bad Gateway"),
			DeniedReason:   ptr("policy"),
			ApprovedBy:     ptr("user_7Hq2"),
			ApprovedAt:     tp(at(3 * time.Minute)),
			ExpiresAt:      tp(at(7 * time.Minute)),
			CompletedAt:    tp(at(3*time.Minute + 900*time.Millisecond)),
			DurationMs:     i64(812),
			AutomationID:   ptr(autom),
			RunID:          ptr(run),
			Drifted:        true,
			DefinitionHash: ptr("9f2c4e0b7a1d3c5e8f6a2b4d0c1e3f5a7b9d2c4e6f8a0b1c3d5e7f9a2b4c6d8e"),
			ReviewedHash:   ptr("1a3c5e7f9b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a4c6e8b0d1f3a"),
			DefinitionDiffJSON: ptr(`{"reviewed_known":true,"changes":[{"path":"params.properties.delete_all","change":"added",` +
				`"new":{"type":"boolean"}}]}`),
		},
		&AuditEvent{
			Action:         "secret.create",
			ActorType:      AuditActorAPIKey,
			ActorID:        ptr("0195a3c2-3a00-7000-8000-0000000000e1"),
			APIKeyID:       ptr("0195a3c2-3a00-7000-8000-0000000000k1"),
			ImpersonatorID: ptr("0195a3c2-3a00-7000-8000-0000000000s1"),
			TargetType:     "secret",
			TargetID:       "0195a3c2-3a00-7000-8000-0000000000f1",
			RequestID:      ptr("req_4f2a9c1e"),
			DetailsJSON:    ptr(`{"key":"STRIPE_API_KEY","repo_id":null}`),
		},
		&BillingState{
			FromState:            StateActive,
			ToState:              StateGrace,
			Reason:               "balance_depleted",
			BalanceCreditsMicros: -1_250_000,
			GraceExpiresAt:       tp(at(5 * time.Minute)),
			Plan:                 ptr("pro"),
			Enforcement:          ptr("block_new_sessions"),
			PerformedBy:          ptr("user_7Hq2"),
		},
		&BillingUsage{
			IdempotencyKey: fmt.Sprintf("compute:%s:%d:%d", session, at(0).UnixMilli(), at(30*time.Second).UnixMilli()),
			Kind:           UsageCompute,
			QuantityMicros: 500_000, // half a minute
			Unit:           UnitMinute,
			CreditsMicros:  500_000,
			SessionID:      ptr(session),
			PeriodFrom:     at(0),
			PeriodTo:       at(30 * time.Second),
			Final:          true,
			RequestID:      ptr("chatcmpl-9f8e7d6c"),
			Model:          ptr("anthropic/claude-sonnet-4-5-20250929"),
			SourceEventID:  ptr("0195a3c3-1b00-7c00-8d00-0000000000b2"),
		},
		&LLMSpend{
			RequestID:        "chatcmpl-9f8e7d6c",
			SessionID:        ptr(session),
			Model:            "anthropic/claude-sonnet-4-5-20250929",
			ModelGroup:       ptr("claude-sonnet-4-5"),
			Provider:         ptr("anthropic"),
			InputTokens:      1_834,
			OutputTokens:     612,
			CacheReadTokens:  24_576,
			CacheWriteTokens: 2_048,
			TotalTokens:      29_070,
			CostUSDMicros:    31_494, // $0.031494
			StartedAt:        at(time.Minute),
			EndedAt:          at(time.Minute + 7400*time.Millisecond),
			Source:           "proxy",
		},
		&RunLifecycle{
			RunID:          run,
			AutomationID:   autom,
			TriggerEventID: tevent,
			TriggerID:      ptr(trigger),
			FromStatus:     ptr(RunRunning),
			ToStatus:       RunSucceeded,
			Attempt:        1,
			StatusReason:   ptr("completed"),
			FailureStage:   ptr("execution"),
			SessionID:      ptr(session),
			CompletionID:   ptr("cmpl_01HZX3"),
			Outcome:        ptr("succeeded"),
			Summary:        ptr("Fixed the nil dereference in `config.Load` and opened acme/api#43."),
			ErrorCode:      ptr("session_terminated"),
			ErrorMessage:   ptr("attempt 0: sandbox stopped before automation.complete"),
			DeadlineAt:     tp(at(2 * time.Hour)),
		},
		&SessionEvent{
			SessionID:       session,
			Kind:            SessionKindPaused,
			Status:          ptr(SessionStatusPaused),
			SessionType:     ptr("coding"),
			ClientType:      ptr("automation"),
			Origin:          ptr("web"),
			PauseReason:     ptr("inactivity"),
			StopReason:      ptr("automation_completed"),
			Outcome:         ptr("succeeded"),
			AutomationID:    ptr(autom),
			RunID:           ptr(run),
			RepoID:          ptr("7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"),
			ConfigurationID: ptr("1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"),
			SandboxProvider: ptr("local"),
			SandboxID:       ptr("sbx_4f3e2d1c"),
			SnapshotID:      ptr("snap_9a8b7c6d"),
			UserID:          ptr("user_7Hq2"),
			Title:           ptr("Fix crash on empty config"),
			Telemetry: &SessionTelemetry{
				ToolCalls:         17,
				MessagesExchanged: 6,
				ActiveSeconds:     412,
				PRURLs:            []string{"https://github.com/acme/api/pull/43"},
				LatestTask:        ptr("Running go test ./..."),
			},
			Limit: &SandboxLimit{Kind: "memory", Detail: "the sandbox ran out of memory (limit 2 GiB): the kernel killed one of its processes"},
		},
		&SessionTranscript{
			SessionID: session,
			Kind:      TranscriptToolCallKind,
			MessageID: ptr("msg_01JQ3B4C5D6E7F"),
			PartID:    ptr("prt_01JQ3B4C5D6E80"),
			Role:      ptr("assistant"),
			UserID:    ptr("0195a3c2-3a00-7000-8000-0000000000u1"),
			Text:      ptr("Running the tests"),
			Tool: &TranscriptToolCall{
				ToolCallID: "toolu_01A2B3C4D5",
				Name:       "bash",
				Status:     "completed",
				Title:      ptr("go test ./..."),
				InputJSON:  `{"command":"go test ./..."}`,
				Output:     "ok  \tgithub.com/acme/api\t0.412s",
				Error:      ptr("exit status 1"),
				DurationMs: 412,
				Truncated:  true,
			},
			Status:    ptr("running"),
			Code:      ptr("agent_error"),
			Truncated: true,
		},
		&ToolCall{
			SessionID:  session,
			ToolCallID: "toolu_01A2B3C4D5",
			ToolName:   "automation.complete",
			Status:     ToolCallCompleted,
			ExecutedBy: "gateway",
			Title:      ptr("Report run outcome"),
			StartedAt:  tp(at(4 * time.Minute)),
			DurationMs: i64(143),
			Error:      ptr("first attempt: context deadline exceeded"),
			Cached:     true,
			RunID:      ptr(run),
		},
		&TriggerEvent{
			TriggerEventID:      tevent,
			TriggerID:           trigger,
			AutomationID:        autom,
			IntegrationID:       ptr(integr),
			TriggerType:         "webhook",
			Provider:            "github",
			NormalizedEventType: "issue_opened",
			ProviderEventType:   "issues:opened",
			ProviderOccurredAt:  at(-2 * time.Second),
			DedupKey:            "github:2871934:opened",
			Title:               "Crash on empty config",
			URL:                 ptr("https://github.com/acme/api/issues/42"),
			ExternalID:          ptr("2871934"),
			Context:             `{"repo":"acme/api","issue":42,"labels":["bug"]}`,
			Status:              TriggerEventMatched,
			SkipReason:          ptr("duplicate"),
			Error:               ptr("first delivery: run_create_failed"),
			RunID:               ptr(run),
			WebhookEventID:      ptr(webhook),
			PollGroupID:         ptr("8b9c0d1e-2f3a-4b4c-9d5e-6f7a8b9c0d1e"),
		},
		&WebhookReceived{
			Provider:          "github",
			Route:             WebhookRouteNango,
			Method:            "POST",
			RequestPath:       "/webhooks/nango",
			IntegrationID:     ptr(integr),
			ConnectionID:      ptr("conn_acme_github"),
			TriggerID:         ptr(trigger),
			WebhookPath:       ptr("t_3f9a1c2b7d4e"),
			DeliveryID:        ptr("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
			ProviderEventType: ptr("issues"),
			ContentType:       "application/json",
			Headers: map[string]string{
				"user-agent":        "GitHub-Hookshot/044aadd",
				"x-github-event":    "issues",
				"x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			},
			Body: body,
			BodyRef: &WebhookBodyRef{
				Ref:    "s3://proliferate-blobs/webhooks/2025/03/14/0195a3c2-9000-7000-8000-00000000000a",
				SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				Size:   734213,
			},
			SignatureVerified: true,
			ReceivedAt:        at(-time.Second),
			RemoteAddr:        ptr("140.82.115.10"),
		},
	}

	out := make([]*Event, len(payloads))
	for i, p := range payloads {
		e := &Event{Payload: p}
		e.EventID = fmt.Sprintf("0195a3c2-9000-7000-8000-%012x", i+1)
		e.EventType = p.EventType()
		e.OccurredAt = at(time.Duration(i) * time.Second)
		e.OrgID = org
		e.TraceID = trace
		e.CorrelationID = corr
		out[i] = e
	}
	return out
}
