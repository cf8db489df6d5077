// Package p2p forms a job's ranks into a transport.Endpoint over go-libp2p: it gives every
// rank an identity, admits only the job's ranks, meets them through rank 0, and connects a
// pair of ranks with one duplex data connection when one of them first needs the other, over
// which transport.NewDialingStreamEndpoint frames the messages. A rank thus holds connections
// only to the peers its collectives and services talk to: a ring's two neighbours, a
// butterfly's log2 p partners, its host's ranks in a hierarchy, its servers.
//
// It must never: admit a peer that is not one of the job's ranks; send a direct-path token
// anywhere but over the secure libp2p channel (the rendezvous table) and to the rank that owns
// it; panic, exit or hang on a bad peer (a wrong secret, a stray connection, a garbled hello,
// a missing rank: each is an error or a log line naming the rank and the address); keep any
// process-wide state; take a same-host path (shm, unix) between ranks that did not prove one
// host, whatever their host names; give one rank of a job an arena and another none; or leave
// goroutines, connections, socket, host-proof or arena files behind after Endpoint.Close (or
// after a failed Join).
//
// # Identities
//
// Rank r's libp2p key is the Ed25519 key whose seed is SHA-256(secret || r), with r as an
// 8-byte big-endian integer and secret the per-job HETSYNC_JOB_SECRET. Every rank therefore
// knows every peer's ID before it dials, and a process without the secret cannot hold a
// member's key.
//
// # The gater
//
// Each host has a connection gater that admits, in both directions, only peers whose ID is one
// of the job's Size IDs. With Security "tls" the peer ID is proven by the TLS 1.3 handshake, so
// an outsider (or a rank started with a wrong secret) is refused. With Security "none" peer IDs
// are exchanged in the clear and not proven: the gater then only keeps honest mistakes out
// (another job, a wrong secret), not an attacker, and "none" belongs on trusted networks only.
//
// The hosts are built for a closed cluster: TCP transport only, listening on one address
// (Config.Host; rank 0 on the rendezvous port), yamux, no resource-manager limits and no
// connection manager (a job's connection count is fixed and small), no relay, ping, metrics,
// address discovery, DHT or mDNS, no port reuse.
//
// # Rendezvous (/hetsync/rendezvous/1)
//
// Rank 0 listens on Config.Rendezvous. Every other rank dials it (retrying while it is not up
// yet, until JoinTimeout), expecting rank 0's derived ID: if the remote key does not match, the
// secret differs and the rank fails at once with "rank R: cannot join rank 0 at ADDR: peer
// identity does not match the job (wrong HETSYNC_JOB_SECRET?)". It then opens a rendezvous
// stream and sends one length-prefixed JSON registration: rank, size, local rank, hostname,
// its host proof (below), libp2p addresses, direct-path addresses (TCP listener, Unix socket path), a fresh random
// 32-byte token, security and data path. Rank 0 checks that the registration's rank matches the
// authenticated peer ID and that size, security and data path agree with its own; a
// disagreement or a rank registered twice fails the job on rank 0 and is reported to every
// registered rank. While ranks are missing, rank 0 logs every 5 s how many joined and which
// are missing. When all Size ranks have registered, the table goes down a tree (tabletree.go):
// rank 0 sends it to its 8 children and sends every other rank its parent's entry, and each
// rank fetches the table from its parent, which passes it on once it has it; rank 0 thus sends
// 8 copies of the O(p) table, not p. When JoinTimeout expires first, rank 0 fails with the
// list of missing ranks and tells the ranks that did register. A connection refused by the gater never reaches this protocol:
// rank 0 keeps waiting for the real rank. Rank 0 keeps answering the protocol after the job
// formed: a late registration (a second process with a running rank's number) is told that
// the job has formed. A rendezvous port already taken is reported as such before libp2p
// tries it.
//
// Before its files are made, a joining rank sweeps those of ranks killed during an earlier
// job's setup (sweep.go): segment and host-proof files in /dev/shm that no process holds a
// lock on (a live rank locks its own), and rank sockets in os.TempDir() that nothing listens
// on, of this user and older than two minutes.
//
// # Data paths
//
// # Connections on first use
//
// Every rank listens on its direct paths (and, for "stream", the libp2p protocol) from before
// it registers until its endpoint closes. The first Send to or Recv from a peer without a
// connection dials it, bounded by Config.JoinTimeout, and every call on that peer waits for
// the dial; a dial that fails fails them all with an error naming both ranks, the path and
// the reason (with, for a peer on this host, whether its process is stopped or gone). The
// listener hands an accepted connection to its endpoint as soon as the hello is answered.
// When two ranks dial each other at once, the lower rank's connection is kept: the lower rank,
// dialing, answers the higher one's hello with "crossed", the higher rank accepts the lower
// one's, and its own dial then waits for that connection. A second hello for a linked pair is
// refused as a duplicate. Two ranks set up a pair's connection only once, so the work of
// forming it (a TLS handshake, a shared-memory segment) is paid only by pairs that talk.
// Exceptions: the arena exchange (below) links rank 0 to every rank while the job forms, on a
// job that may run on one host; and the "stream" path links every pair while the job forms
// (its streams ride the libp2p connections, found by peer ID, on which a second process that
// holds a rank's key could otherwise take a pair's stream).
//
// After it has the peer table a rank closes the libp2p connections it opened to join (to rank
// 0 and to its table parent), except on the "stream" path: rank 0 is left with none from the
// formation, and what the job needs later dials again.
//
// What a rank keeps per peer, linked or not, is O(p) in all but small: the peer table entry
// (addresses, token, host proof: a few hundred bytes), its ID, its locality verdict, its
// heartbeat record and a pointer and a flag in the endpoint and the acceptor. Buffers are per
// link: the endpoint's read buffer (StreamOptions.ReadBuffer, 64 KiB), the socket buffers (4
// MiB each way on direct paths) or a shared-memory segment; and a heartbeat stream per
// watched peer (O(log p) of them).
//
// The dialer of a pair decides its path from the table and the listener serves whichever
// path it is dialed on, so they agree without another message:
//
//   - "stream": a libp2p stream (/hetsync/data/1) over the libp2p connection: authenticated
//     and encrypted with tls, neither with none. It costs several times the CPU per byte of
//     raw TCP (TLS records, yamux framing and flow control, copies between them).
//   - "tcp": a plain TCP connection beside libp2p (TCP_NODELAY, 4 MiB socket buffers):
//     authenticated by the token hello below, never encrypted. For trusted networks.
//   - "tls": TLS 1.3 (crypto/tls) over a direct TCP connection beside libp2p (tuned as tcp),
//     whatever Security says. Each rank presents a self-signed X.509 certificate over its
//     Ed25519 rank key; each side accepts the other only when the certificate's key is
//     exactly the expected one (the dialer: the rank it dials; the listener: a lower rank,
//     which the hello must then name), and the handshake proves possession of that key. No
//     certificate authority, name or date is consulted: the job secret is the only root of
//     trust, as for the libp2p connections, so an outsider or a rank with a wrong secret is
//     refused before any hello. The hello then runs inside TLS, so the token never crosses
//     the network in the clear. After the hello both sides switch, at the same byte, to a
//     record layer of this package keyed by the TLS exporter: AES-128-GCM records of up to
//     256 KiB, one key, IV and counter per direction, sealed from the caller's buffer and
//     opened into it (datachannel.go says why not TLS's own records). A changed, dropped,
//     repeated or cut record is an error; only a close record ends the stream cleanly.
//     docs/results/secure-path.md has what it costs per byte.
//   - "unix": a Unix socket file in os.TempDir() named after a hash of the secret and the
//     rank (a file rather than the abstract namespace, so ranks in different network
//     namespaces of one host meet), for ranks that proved one host. Authenticated by the
//     hello; the file is removed when the endpoint closes.
//   - "shm": shared memory (transport/shm) for ranks that proved one host. The dialer
//     connects to the listener's Unix socket as for "unix", creates a segment file in
//     /dev/shm (mode 0600, random name) and sends its name in the hello (magic HSYNCSM1, the
//     usual fields, then the name in 64 bytes); the listener checks the hello first, then the
//     name and the file (owner, header), maps it and unlinks it, and answers; the dialer
//     unlinks it too. The pair then talks over two rings in the mapping, one per direction,
//     sized by the dialer from the ranks it proved on its host so that all pairs of the host
//     stay within Config.ShmHostBudget (shm.HostRingSize: 2 MiB up to 23 ranks), and keeps
//     the Unix socket for doorbells (waking a side that sleeps) and as the liveness signal:
//     a peer that dies without closing is an error naming it (wrapping shm.ErrPeerGone),
//     never a hang. Ranks on different hosts are an error naming both.
//   - "cma": "shm" whose writes of at least Config.SingleCopyMin bytes the receiver copies
//     straight from the sender's buffer (process_vm_readv), one copy instead of two, in each
//     direction where the receiver proved at connect time that the kernel lets it read the
//     sender's memory; a refused direction (another user, Yama's ptrace_scope, a container's
//     seccomp profile) keeps the rings, with a warning, and DataPaths reports "cma" only for
//     pairs that really use it. Not the default: where ranks share few cores, two copies
//     through a ring that stays in cache are faster than the kernel's page-by-page copy
//     (docs/results/cma.md).
//   - "auto" (default): shm between ranks that proved one host (a listener that cannot map
//     the segment makes the pair fall back to unix); otherwise tcp when Security is none, else
//     tls. If a same-host Unix socket turns out unreachable (containers that share a host
//     name), the pair falls back to that network path.
//
// # Same host by proof
//
// A host name is no identity (containers, network namespaces and cloned images share names),
// so two ranks share a host only when they prove it. Before registering, each rank writes a
// file of 32 random bytes into /dev/shm (mode 0600, named hetsync-host-TAG-RANK-RANDOM) and
// registers its name, the SHA-256 of its bytes, and its network namespace (the target of
// /proc/self/ns/net). With the table, each rank reads every peer's file: a peer whose file it
// reads, with the published hash, shares its memory (its kernel); if their network namespaces
// are also one, the pair shares a host and may take the same-host paths (shm, unix). Ranks in
// different network namespaces of one machine talk through a network (a veth, a bridge), so
// they are different hosts. Config.Hostname (HETSYNC_HOSTNAME) is an explicit override that
// can only part ranks: two ranks that set different names are different hosts whatever they
// prove; equal names do not spare the proof. The dialer's verdict picks the path of the pair
// and the listener serves whatever it is dialed on, so both ends agree. With DataPath "unix"
// or "shm", each rank checks every pair it belongs to before dialing and fails with both
// ranks named and the reason (which file it could not read, or the two namespaces). The file
// lives until the endpoint closes or Join fails, because peers read it while they join. The
// endpoint reports its verdicts through transport.HostLocality, from which the link
// measurement (topology) forms the job's hosts.
//
// Every data connection, libp2p streams and TLS connections included, starts with a hello from
// the dialer: magic, a job tag (a hash of the secret), its rank, the listener's rank and the
// listener's token. The listener checks each (the token in constant time), and on a stream or
// a TLS connection also that the authenticated key belongs to the claimed rank, answers with a
// status byte, and closes a refused connection after logging the reason and the dialing address. The token crosses the
// network only inside the secure rendezvous channel and in the hello on the data connection
// itself, so on a plaintext path an eavesdropper on that link could learn it; it is only ever
// accepted once per rank (a second hello for a linked pair is refused as a duplicate), for as
// long as the endpoint is open.
//
// # Arena
//
// A job whose ranks all proved one host and whose data path may take shared memory ("auto",
// "shm", "cma") forms with an arena (transport.Arena, a transport/shm arena file of
// Config.ArenaBytes, by default DefaultArenaBytes: the collectives' whole layout,
// transport.ArenaBytesFor, or half of what /dev/shm has free when that is less), on every
// rank or on none, so that a collective may choose its algorithm by it. After the data
// connections and before the framing starts on them, rank 0 creates the file and offers its
// name to every rank over its connection (rank 0 dials every rank for it, when the peer table
// leaves one host possible: all ranks name one host name, host override and network
// namespace; a table that names several skips the exchange on every rank, and the job has no
// arena); each maps it if it wants one (it proved every rank
// on its host and did not turn it off) and answers; rank 0 unlinks the file and tells every
// rank to use it only if all mapped it, else none (arena.go). An arena wait fails naming a
// rank whose process exited, whose endpoint closed, or whom the heartbeats failed. The
// endpoint closes the arena first when it closes.
//
// # Heartbeats (/hetsync/heartbeat/1)
//
// Once the job is formed, every rank keeps one libp2p stream to every peer it watches and
// writes a 48-byte heartbeat on it every PeerTimeout/8 (at most every second): what its
// collectives last did (transport.Activity) and the timestamps that give the control path's
// round trip. A rank watches, from the end of its join, every rank of a job of up to 16 ranks;
// in a larger job, the ranks rank XOR 2^k and its ring neighbours (O(log p), each of a pair
// watching the other, every rank watched, at most 2·log2 p hops between any two ranks); and,
// in any job, every peer it links to, from the moment the link is up. Heartbeats travel on the
// libp2p connections, apart from the data connections, so a peer that is busy moving a large
// message still answers, and a rank that has nothing to receive from a frozen peer still
// notices it. A peer that sends nothing for Config.PeerTimeout (default 8 s: SIGSTOP, a paused
// VM, a lost host) is failed: every pending and later Recv from it returns a
// *transport.UnresponsiveError naming it, and its data connection is closed. A dead process
// (SIGKILL) is seen sooner, as its data connection ends. Until a peer's first heartbeat
// arrives (and again after its stream was reset, which libp2p does to a connection it drops)
// it is given the join timeout instead, since a loaded host may take that long to open a libp2p
// connection, unless the kernel says the peer's process (on this host) is stopped.
//
// A rank whose heartbeats fail a peer (silent, or its process gone) tells it in its next
// heartbeats (sent at once, then round the list of the failures it knows), and a rank told
// passes it on: every rank fails the peer within
// about the peer timeout and a few round trips, with a *transport.PeerReportedError naming
// it and the rank that told it. A rank that waits on the failed rank through others, or whose
// first call to it dials a process that accepts and never answers, is so told instead of
// waiting for the dial's bound.
//
// A rank that closes its endpoint says goodbye first, so that ranks finishing at different
// times do not fail each other. This works the same under every launcher, since the ranks
// watch one another themselves.
//
// Join is bounded by Config.JoinTimeout (and its context). Endpoint.Close closes the framed
// endpoint, every data connection and the libp2p host.
package p2p
