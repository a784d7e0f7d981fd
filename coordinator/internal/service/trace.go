package service

// SpanSubmit names the coordinator's span of a submission, the parent of
// every later span of the workflow.
const SpanSubmit = "submit"
