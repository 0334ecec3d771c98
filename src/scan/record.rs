//! A stream that keeps a copy of the first bytes the server sends, so the
//! scanner can read the server's banner and first KEXINIT ([`super::hello`])
//! after russh has read them for the handshake.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::hello::{self, CAPTURE_LIMIT, Greeting};

/// What the server sent, as far as [`CAPTURE_LIMIT`], and whether it
/// closed the connection.
#[derive(Clone, Default)]
pub struct Heard {
    bytes: Arc<Mutex<Vec<u8>>>,
    closed: Arc<AtomicBool>,
}

impl Heard {
    /// The server's first bytes, read.
    pub fn greeting(&self) -> Greeting {
        let bytes = self.bytes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        hello::parse(&bytes, self.closed.load(Ordering::SeqCst))
    }
}

/// `inner`, recording what is read from it into a [`Heard`].
pub struct Recording<S> {
    inner: S,
    heard: Heard,
}

impl<S> Recording<S> {
    pub fn new(inner: S) -> (Self, Heard) {
        let heard = Heard::default();
        (
            Recording {
                inner,
                heard: heard.clone(),
            },
            heard,
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Recording<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        // A read into no room reads nothing without the server having
        // closed anything.
        let room = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() == before => {
                if room {
                    self.heard.closed.store(true, Ordering::SeqCst);
                }
            }
            Poll::Ready(Ok(())) => {
                let mut bytes = self
                    .heard
                    .bytes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let room = CAPTURE_LIMIT.saturating_sub(bytes.len());
                let new = &buf.filled()[before..];
                bytes.extend_from_slice(&new[..new.len().min(room)]);
            }
            Poll::Ready(Err(_)) => self.heard.closed.store(true, Ordering::SeqCst),
            Poll::Pending => {}
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Recording<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn what_is_read_is_kept_and_the_end_is_seen() {
        let (mut server, client) = tokio::io::duplex(64);
        let (mut recording, heard) = Recording::new(client);
        server.write_all(b"Not allowed at this time\r\n").await.unwrap();
        drop(server);
        let mut got = Vec::new();
        recording.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"Not allowed at this time\r\n");
        assert_eq!(heard.greeting(), Greeting::Refused(hello::PENALTY_REFUSAL.to_owned()));
    }

    /// A read with no room in the buffer is not the server's end: lines
    /// before the banner are not yet a refusal.
    #[tokio::test]
    async fn a_read_into_no_room_is_not_the_end() {
        let (mut server, client) = tokio::io::duplex(64);
        let (mut recording, heard) = Recording::new(client);
        server.write_all(b"Not allowed at this time\r\n").await.unwrap();
        let mut line = [0u8; 26];
        recording.read_exact(&mut line).await.unwrap();
        let mut none: [u8; 0] = [];
        let mut empty = ReadBuf::new(&mut none);
        std::future::poll_fn(|cx| Pin::new(&mut recording).poll_read(cx, &mut empty))
            .await
            .unwrap();
        assert_eq!(heard.greeting(), Greeting::Incomplete);
    }
}
