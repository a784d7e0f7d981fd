package bus

// Action names what the disposition does with the message: "ack", "nak",
// "term" or "abandon" (for metrics and logs).
func (d Disposition) Action() string {
	switch d.action {
	case actNak:
		return "nak"
	case actTerm:
		return "term"
	case actAbandon:
		return "abandon"
	}
	return "ack"
}
