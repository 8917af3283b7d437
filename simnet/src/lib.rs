//! The simulation's network: named hosts that listen, peers with their own
//! addresses that dial them, and in-memory byte streams between the two.
//!
//! Layout:
//! - [`Net`]: the registry of listening hosts and open links; crashing a
//!   host cuts every link it serves, in link order.
//! - [`SimListener`]: a host's listening socket, an `axum::serve::Listener`,
//!   so the coordinator is served by the same `axum::serve` as in
//!   production (hyper, the WebSocket upgrade, `ConnectInfo`).
//! - [`SimStream`]: one end of a link (`AsyncRead + AsyncWrite`).
//! - [`SimHttp`]: the router's `HttpTransport` as real HTTP/1.1 over a link.
//! - [`SimWsConnector`]: a worker's connector, a real WebSocket handshake
//!   over a link.
//!
//! Why not turmoil: turmoil simulates TCP per host with its own scheduler
//! and needs its own `TcpListener`/`TcpStream` types threaded through every
//! socket user, and it has no `axum::serve::Listener`. What we need is
//! narrower: real bytes between peers on the one current-thread runtime the
//! harness already drives under paused time, per-peer addresses, and the
//! ability to kill a host. Byte streams over `tokio::io::duplex` give that
//! with the production server code untouched.
//!
//! Link faults ([`Net::set_link_fault`]): the links between one peer and
//! one host can be cut (a partition: open links reset, new connects
//! refused), delayed by a fixed time, or held (bytes buffered, released at
//! the repair), until the fault is lifted. Timers run on the paused clock.
//!
//! Determinism: everything happens on one current-thread runtime; links are
//! kept in creation order and cut or reshaped in that order, so the tasks a
//! fault wakes run in the same order every time.

mod http;
mod stream;
mod ws;

pub use http::{serve, HttpStream, SimHttp};
pub use stream::SimStream;
pub use ws::SimWsConnector;

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use stream::Link;
use tokio::sync::mpsc;

/// Bytes buffered in each direction of a link before a writer waits.
pub const LINK_BUFFER_BYTES: usize = 64 * 1024;

/// The port every simulated host listens on.
pub const HOST_PORT: u16 = 80;

/// The whole simulated network. Cheap to clone.
#[derive(Clone, Default)]
pub struct Net {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    hosts: BTreeMap<String, Host>,
    /// Open links by id (creation order), with the host that serves each.
    links: BTreeMap<u64, LinkEntry>,
    /// Faults on the links between a peer and a host, by who set them.
    faults: BTreeMap<(SocketAddr, String), BTreeMap<String, LinkFault>>,
    next_link: u64,
    /// Peer addresses by name, handed out in order of first request.
    peers: BTreeMap<String, SocketAddr>,
}

struct LinkEntry {
    host: String,
    from: SocketAddr,
    link: Weak<Link>,
}

/// What is wrong with the links between a peer and a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    /// A partition: open links are reset, new connects refused.
    Cut,
    /// Every byte arrives this much later than it was written.
    Delay(Duration),
    /// Bytes are buffered (up to a bound) and delivered at the repair.
    Hold,
}

impl LinkFault {
    /// The fault in force when several are set.
    fn strongest<'a>(faults: impl Iterator<Item = &'a LinkFault>) -> Option<LinkFault> {
        faults.copied().max_by_key(|f| match f {
            LinkFault::Cut => (2, Duration::ZERO),
            LinkFault::Hold => (1, Duration::ZERO),
            LinkFault::Delay(d) => (0, *d),
        })
    }
}

struct Host {
    addr: SocketAddr,
    accept: Option<mpsc::UnboundedSender<(SimStream, SocketAddr)>>,
    /// Taken down by the scenario: connections are refused, open ones stay.
    refusing: bool,
}

impl Net {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts listening as `host` (replacing an earlier listener of the
    /// same host, as a restarted process binds its port again).
    pub fn listen(&self, host: &str) -> SimListener {
        let mut state = self.lock();
        let count = state.hosts.len();
        let (tx, rx) = mpsc::unbounded_channel();
        let entry = state.hosts.entry(host.to_owned()).or_insert_with(|| Host {
            addr: numbered(1, count),
            accept: None,
            refusing: false,
        });
        entry.accept = Some(tx);
        SimListener {
            addr: entry.addr,
            incoming: rx,
        }
    }

    /// The address `host` listens on, once it has listened.
    pub fn host_addr(&self, host: &str) -> Option<SocketAddr> {
        self.lock().hosts.get(host).map(|h| h.addr)
    }

    /// The address of the peer called `name`: stable for the run, distinct
    /// per peer, so per-client limits see separate clients. Addresses are
    /// in 127.0.0.0/8 and are only labels: nothing is sent on any socket.
    pub fn peer_addr(&self, name: &str) -> SocketAddr {
        let mut state = self.lock();
        let count = state.peers.len();
        *state
            .peers
            .entry(name.to_owned())
            .or_insert_with(|| numbered(2, count))
    }

    /// Opens a link from `from` to `host`; refused when nothing listens.
    pub fn connect(&self, from: SocketAddr, host: &str) -> io::Result<SimStream> {
        let mut state = self.lock();
        let refused = || io::Error::new(io::ErrorKind::ConnectionRefused, host.to_owned());
        let accept = state
            .hosts
            .get(host)
            .filter(|h| !h.refusing)
            .and_then(|h| h.accept.clone())
            .ok_or_else(refused)?;
        let fault = state
            .faults
            .get(&(from, host.to_owned()))
            .and_then(|by| LinkFault::strongest(by.values()));
        if fault == Some(LinkFault::Cut) {
            return Err(refused());
        }
        let (client, server, link) = stream::pair(LINK_BUFFER_BYTES);
        if let Some(fault) = fault {
            shape(&link, fault);
        }
        accept.send((server, from)).map_err(|_| refused())?;
        state.links.retain(|_, entry| entry.link.strong_count() > 0);
        let id = state.next_link;
        state.next_link += 1;
        state.links.insert(
            id,
            LinkEntry {
                host: host.to_owned(),
                from,
                link: Arc::downgrade(&link),
            },
        );
        Ok(client)
    }

    /// Kills `host` as a crashed process: it stops listening and every link
    /// it serves is cut (both ends see the connection end), in link order.
    pub fn crash(&self, host: &str) {
        let cut: Vec<Arc<Link>> = {
            let mut state = self.lock();
            if let Some(h) = state.hosts.get_mut(host) {
                h.accept = None;
            }
            let ids: Vec<u64> = state
                .links
                .iter()
                .filter(|(_, entry)| entry.host == host)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| state.links.remove(&id).and_then(|e| e.link.upgrade()))
                .collect()
        };
        for link in cut {
            link.cut();
        }
    }

    /// Takes `host` off the network (new connections are refused; open
    /// ones stay) or puts it back.
    pub fn set_refusing(&self, host: &str, refusing: bool) {
        if let Some(h) = self.lock().hosts.get_mut(host) {
            h.refusing = refusing;
        }
    }
}

impl Net {
    /// Puts `fault` (set by `owner`) on every link between the peer called
    /// `peer` and `host`, open or opened later, or lifts `owner`'s fault
    /// (`None`). Faults of several owners add up: a cut wins over a hold,
    /// a hold over a delay, the longest delay over shorter ones. When none
    /// is left, held bytes are delivered, delays end, connects are
    /// accepted again. Open links are changed in link order.
    pub fn set_link_fault(&self, peer: &str, host: &str, owner: &str, fault: Option<LinkFault>) {
        let from = self.peer_addr(peer);
        let (fault, links): (Option<LinkFault>, Vec<Arc<Link>>) = {
            let mut state = self.lock();
            let by = state.faults.entry((from, host.to_owned())).or_default();
            match fault {
                Some(fault) => by.insert(owner.to_owned(), fault),
                None => by.remove(owner),
            };
            let fault = LinkFault::strongest(by.values());
            if by.is_empty() {
                state.faults.remove(&(from, host.to_owned()));
            }
            let links = state
                .links
                .values()
                .filter(|e| e.from == from && e.host == host)
                .filter_map(|e| e.link.upgrade())
                .collect();
            (fault, links)
        };
        for link in links {
            match fault {
                Some(fault) => shape(&link, fault),
                None if link.is_shaped() => link.set_shape(Duration::ZERO, false),
                None => {}
            }
        }
    }
}

fn shape(link: &Link, fault: LinkFault) {
    match fault {
        LinkFault::Cut => link.cut(),
        LinkFault::Delay(delay) => link.set_shape(delay, false),
        LinkFault::Hold => link.set_shape(Duration::ZERO, true),
    }
}

/// `127.<kind>.x.y`, the `n`th address of a kind (1: hosts, 2: peers).
fn numbered(kind: u8, n: usize) -> SocketAddr {
    let n = u16::try_from(n).expect("fewer than 65,536 simulated addresses") + 1;
    let [hi, lo] = n.to_be_bytes();
    let port = if kind == 1 { HOST_PORT } else { 40_000 };
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, kind, hi, lo)), port)
}

/// A simulated host's listening socket.
pub struct SimListener {
    addr: SocketAddr,
    incoming: mpsc::UnboundedReceiver<(SimStream, SocketAddr)>,
}

impl axum::serve::Listener for SimListener {
    type Io = SimStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (SimStream, SocketAddr) {
        match self.incoming.recv().await {
            Some(accepted) => accepted,
            // The host crashed or listens anew elsewhere: accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

/// The host of an `http://host[:port]/...` or `ws://...` URL.
pub(crate) fn host_of(url: &str) -> io::Result<String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {e}")))?;
    uri.host()
        .map(str::to_owned)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: no host")))
}
