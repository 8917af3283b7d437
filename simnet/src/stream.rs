//! One simulated connection: a `tokio::io::duplex` pair that the network
//! can cut, as a killed process's sockets end for its peers, and shape:
//! delay every byte by a fixed time, or hold bytes until a repair.
//!
//! Shaping works at the reading end. Each write on a shaped link records a
//! mark (its byte range and when it may be read: `now + delay`, or never
//! while held); a reader pulls bytes from the duplex into a buffer of its
//! own and hands out only those whose mark is due, in order, sleeping on
//! the paused clock until the next one is. A link is shaped from the first
//! fault on it; links never shaped take the plain path, byte for byte as
//! before.

use futures_util::task::AtomicWaker;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Bytes a reading end buffers while they wait for their mark (delay or
/// hold); beyond it the reader stops pulling and the writer waits on the
/// duplex's own buffer.
pub const HELD_BYTES_MAX: usize = 1024 * 1024;

/// What both ends of a link share.
pub(crate) struct Link {
    cut: AtomicBool,
    /// Read and write wakers of end 0, then of end 1: whoever waits on a
    /// cut link must wake to see it.
    wakers: [AtomicWaker; 4],
    /// Bytes each end has written (by writing end), counted always so a
    /// link shaped mid-connection knows where its marks start.
    written: [AtomicU64; 2],
    /// Set at the first fault; never cleared (a repaired link keeps
    /// shaping with no delay, so bytes still held keep their order).
    shaped: AtomicBool,
    shape: Mutex<Shape>,
}

#[derive(Default)]
struct Shape {
    delay: Duration,
    held: bool,
    /// Marks of the bytes each end wrote while shaped, by writing end.
    marks: [VecDeque<Mark>; 2],
}

/// A written byte range and when it may be read (`None`: held).
struct Mark {
    start: u64,
    release_at: Option<Instant>,
}

impl Link {
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn wake_all(&self) {
        for waker in &self.wakers {
            waker.wake();
        }
    }

    pub(crate) fn is_shaped(&self) -> bool {
        self.shaped.load(Ordering::SeqCst)
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    fn shape(&self) -> MutexGuard<'_, Shape> {
        self.shape.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Delays bytes written from now on by `delay`, or holds them
    /// (`held`); lifting a hold releases every held byte at once.
    pub(crate) fn set_shape(&self, delay: Duration, held: bool) {
        self.shaped.store(true, Ordering::SeqCst);
        let now = Instant::now();
        let mut shape = self.shape();
        shape.delay = delay;
        shape.held = held;
        if !held {
            for mark in shape.marks.iter_mut().flatten() {
                mark.release_at.get_or_insert(now);
            }
        }
        drop(shape);
        self.wake_all();
    }
}

/// One end of a link.
pub struct SimStream {
    io: DuplexStream,
    link: Arc<Link>,
    end: usize,
    /// Shaped links only: bytes pulled from the duplex, not yet read.
    pending: VecDeque<u8>,
    /// Bytes handed to the reader so far.
    delivered: u64,
    /// The duplex has ended (its bytes may still be pending).
    eof: bool,
    /// Wakes the reader when the next delayed mark is due.
    sleep: Option<Pin<Box<Sleep>>>,
}

pub(crate) fn pair(buffer_bytes: usize) -> (SimStream, SimStream, Arc<Link>) {
    let (a, b) = tokio::io::duplex(buffer_bytes);
    let link = Arc::new(Link {
        cut: AtomicBool::new(false),
        wakers: Default::default(),
        written: Default::default(),
        shaped: AtomicBool::new(false),
        shape: Mutex::default(),
    });
    let end = |io, end| SimStream {
        io,
        link: link.clone(),
        end,
        pending: VecDeque::new(),
        delivered: 0,
        eof: false,
        sleep: None,
    };
    (end(a, 0), end(b, 1), link)
}

impl SimStream {
    fn read_waker(&self) -> &AtomicWaker {
        &self.link.wakers[self.end * 2]
    }

    fn write_waker(&self) -> &AtomicWaker {
        &self.link.wakers[self.end * 2 + 1]
    }

    /// Pulls what the duplex has into `pending`, up to the bound.
    fn pull(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let mut chunk = [0u8; 8192];
        while !self.eof && self.pending.len() < HELD_BYTES_MAX {
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut self.io).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) if read.filled().is_empty() => self.eof = true,
                Poll::Ready(Ok(())) => self.pending.extend(read.filled()),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => break,
            }
        }
        Ok(())
    }

    /// The offset up to which the peer's bytes are due now, and when the
    /// next mark is due (`None` inside: held until a repair).
    fn due(&self) -> (u64, Option<Option<Instant>>) {
        let now = Instant::now();
        let mut shape = self.link.shape();
        let marks = &mut shape.marks[1 - self.end];
        while marks
            .front()
            .is_some_and(|m| m.release_at.is_some_and(|t| t <= now))
        {
            marks.pop_front();
        }
        match marks.front() {
            None => (u64::MAX, None),
            Some(m) => (m.start, Some(m.release_at)),
        }
    }

    fn poll_read_shaped(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Err(e) = self.pull(cx) {
            if self.pending.is_empty() {
                return Poll::Ready(Err(e));
            }
        }
        let (limit, next) = self.due();
        let due = usize::try_from(limit.saturating_sub(self.delivered)).unwrap_or(usize::MAX);
        let n = due.min(self.pending.len()).min(buf.remaining());
        if n > 0 {
            let bytes: Vec<u8> = self.pending.drain(..n).collect();
            buf.put_slice(&bytes);
            self.delivered += n as u64;
            return Poll::Ready(Ok(()));
        }
        if self.eof && self.pending.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if let Some(Some(at)) = next {
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            sleep.as_mut().reset(at);
            if sleep.as_mut().poll(cx).is_ready() {
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    }
}

fn reset() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "the peer's host crashed")
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.read_waker().register(cx.waker());
        if this.link.is_cut() {
            return Poll::Ready(Err(reset()));
        }
        if this.link.shaped.load(Ordering::SeqCst) {
            return this.poll_read_shaped(cx, buf);
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        this.delivered += (buf.filled().len() - before) as u64;
        read
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.write_waker().register(cx.waker());
        if this.link.is_cut() {
            return Poll::Ready(Err(reset()));
        }
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            let start = this.link.written[this.end].fetch_add(n as u64, Ordering::SeqCst);
            if this.link.shaped.load(Ordering::SeqCst) {
                let mut shape = this.link.shape();
                let release_at = (!shape.held).then(|| Instant::now() + shape.delay);
                shape.marks[this.end].push_back(Mark { start, release_at });
            }
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.write_waker().register(cx.waker());
        if this.link.is_cut() {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.link.is_cut() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
