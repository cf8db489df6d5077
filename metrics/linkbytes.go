package metrics

// LinkBytes is what a rank sent by class of link (payload bytes, headers not counted): to the
// ranks of its own host (shared memory, Unix sockets, loopback), to the ranks of other hosts of
// its group of hosts (rack; every other host when the job has no link matrix to group hosts
// by), and to the ranks of other groups. Their sum is at most bytes_sent: the classes count what
// the trainer's communicator and services send, bytes_sent everything the rank's endpoint sent.
type LinkBytes struct {
	Host   int64 `json:"host"`
	Hosts  int64 `json:"hosts"`
	Groups int64 `json:"groups"`
}

// linkField is one class of LinkBytes as metrics.jsonl names it.
type linkField struct {
	key string
	v   *int64
}

// fields are b's classes with their metrics.jsonl keys, in output order.
func (b *LinkBytes) fields() [3]linkField {
	return [3]linkField{{"sent_host", &b.Host}, {"sent_hosts", &b.Hosts}, {"sent_groups", &b.Groups}}
}

func (b LinkBytes) negative() bool { return b.Host < 0 || b.Hosts < 0 || b.Groups < 0 }

// Add is b + o.
func (b LinkBytes) Add(o LinkBytes) LinkBytes {
	return LinkBytes{Host: b.Host + o.Host, Hosts: b.Hosts + o.Hosts, Groups: b.Groups + o.Groups}
}

// Sub is b − o, what was sent between a count o and a later count b.
func (b LinkBytes) Sub(o LinkBytes) LinkBytes {
	return LinkBytes{Host: b.Host - o.Host, Hosts: b.Hosts - o.Hosts, Groups: b.Groups - o.Groups}
}

// Total is the sum over the classes.
func (b LinkBytes) Total() int64 { return b.Host + b.Hosts + b.Groups }

// addLinks is *sum + b, in a new value when sum is nil.
func addLinks(sum *LinkBytes, b LinkBytes) *LinkBytes {
	if sum == nil {
		sum = new(LinkBytes)
	}
	*sum = sum.Add(b)
	return sum
}
