//! One simulated connection: a `tokio::io::duplex` pair that the network
//! can cut, as a killed process's sockets end for its peers.

use futures_util::task::AtomicWaker;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// What both ends of a link share.
pub(crate) struct Link {
    cut: AtomicBool,
    /// Read and write wakers of end 0, then of end 1: whoever waits on a
    /// cut link must wake to see it.
    wakers: [AtomicWaker; 4],
}

impl Link {
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for waker in &self.wakers {
            waker.wake();
        }
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

/// One end of a link.
pub struct SimStream {
    io: DuplexStream,
    link: Arc<Link>,
    end: usize,
}

pub(crate) fn pair(buffer_bytes: usize) -> (SimStream, SimStream, Arc<Link>) {
    let (a, b) = tokio::io::duplex(buffer_bytes);
    let link = Arc::new(Link {
        cut: AtomicBool::new(false),
        wakers: Default::default(),
    });
    let end = |io, end| SimStream {
        io,
        link: link.clone(),
        end,
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
        Pin::new(&mut this.io).poll_read(cx, buf)
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
        Pin::new(&mut this.io).poll_write(cx, buf)
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
