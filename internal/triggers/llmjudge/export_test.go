package llmjudge

// UserPrompt is the filter's user message, for tests.
func UserPrompt(j *Judge, criterion string, ev Event) string { return j.filterUser(criterion, ev) }
