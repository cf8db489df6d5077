package p2p

import "github.com/hetsync/hetsync/transport"

// testChannel is the channel of the tests' messages: the transport gives none a meaning.
const testChannel transport.Channel = 16
