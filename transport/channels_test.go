package transport

// Channels of the transport's tests: the transport gives no channel a meaning, any values do.
const (
	chanFirst  Channel = 0
	chanSecond Channel = 1
	chanUser   Channel = 16
)
