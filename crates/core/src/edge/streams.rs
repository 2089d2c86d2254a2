//! One HTTP/2 connection's turn: its ready streams run in the connection's own task,
//! then the connection, then one write of everything the turn queued.
//!
//! hyper runs each HTTP/2 stream as a future handed to its executor; with
//! `TokioExecutor` each is a task of its own: a spawn per request, and every frame
//! a stream queues wakes the connection's task, which tokio runs next (often on the
//! other worker), so a quote tick to 10,000 subscribers on 100 connections was
//! 10,000 stream tasks and as many turns of connection tasks. Here the executor of
//! an HTTP/2 connection keeps its streams, and [`Drive`] polls every stream that is
//! ready, then the connection once for all of their frames. Streams of one
//! connection share a task (and so a worker thread), as they already share the
//! connection's lock in h2.
//!
//! h2 writes each DATA frame over 256 bytes with a call of its own (it chains the
//! payload rather than copying it) and flushes after each: [`Coalesced`] keeps a
//! turn's writes in a buffer and [`Drive`] writes it out once the connection has had
//! its turn, as nginx flushes once per pass of its event loop.
//! Measured in docs/BENCHMARKS.md (the quote stream; HTTP/2 hits).

use std::future::Future;
use std::io::{self, IoSlice};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, BytesMut};
use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::{ArcWake, AtomicWaker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How many rounds of new streams one poll takes before it yields to the runtime.
const ROUNDS_PER_POLL: usize = 8;
/// A turn's writes wait in a buffer up to this; past it they are written at once
/// (and a write larger than this goes to the socket as it is).
const TURN_BYTES: usize = 64 << 10;
/// A buffer grown past this is let go once written out: an idle connection keeps
/// no more.
const KEPT_BYTES: usize = 16 << 10;

/// Streams handed over by hyper, not yet polled, and the waker of their task.
#[derive(Default)]
struct Inbox {
    new: Mutex<Vec<BoxFuture<'static, ()>>>,
    waker: AtomicWaker,
    /// Streams started and not yet ended (or dropped).
    open: Arc<AtomicUsize>,
    /// Streams started over the connection's life.
    started: AtomicU64,
}

/// One open stream, counted until it ends or is dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Inbox {
    fn new_streams(&self) -> MutexGuard<'_, Vec<BoxFuture<'static, ()>>> {
        self.new.lock().expect("the inbox lock is never poisoned")
    }
}

/// The executor of one HTTP/2 connection: keeps the streams hyper starts for
/// [`Drive`] to poll.
#[derive(Clone, Default)]
pub(crate) struct ConnExecutor {
    inbox: Arc<Inbox>,
}

impl<F> hyper::rt::Executor<F> for ConnExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        self.inbox.started.fetch_add(1, Ordering::Relaxed);
        self.inbox.open.fetch_add(1, Ordering::Relaxed);
        let open = Open(Arc::clone(&self.inbox.open));
        // A stream that panics ends alone, as a task of its own would: the
        // connection and its other streams go on. The hub may reset it alone.
        let stream = AssertUnwindSafe(super::reset::scoped(stream))
            .catch_unwind()
            .map(move |_| drop(open));
        self.inbox.new_streams().push(Box::pin(stream));
        self.inbox.waker.wake();
    }
}

impl ConnExecutor {
    /// Streams open now, and streams started over the connection's life.
    pub(crate) fn streams(&self) -> (usize, u64) {
        let inbox = &self.inbox;
        (
            inbox.open.load(Ordering::Relaxed),
            inbox.started.load(Ordering::Relaxed),
        )
    }

    /// The future that runs `connection` and the streams it hands to this executor,
    /// writing out what `turn` kept at the end of each of its turns.
    pub(crate) fn drive<C>(&self, connection: C, turn: Arc<dyn Turn>) -> Drive<C> {
        Drive {
            connection: Box::pin(connection),
            inbox: Arc::clone(&self.inbox),
            running: FuturesUnordered::new(),
            turn,
        }
    }
}

/// A connection with its streams: polls each ready stream, then the connection.
/// Ends with the connection (hyper's HTTP/2 connection ends once its streams have,
/// or once the peer is gone, when what is left of them cannot be sent anyway).
pub(crate) struct Drive<C> {
    connection: Pin<Box<C>>,
    inbox: Arc<Inbox>,
    running: FuturesUnordered<BoxFuture<'static, ()>>,
    turn: Arc<dyn Turn>,
}

impl<C: Future> Future for Drive<C> {
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        let done = this.take_turn(cx);
        // ...and what the turn wrote leaves in one write (or waits for the socket,
        // which wakes this task; an error is the connection's to see next), with
        // no regard to tokio's budget, which the streams share with it: a tick
        // that wakes more streams than the budget holds would otherwise leave
        // their frames for a later turn. The write is bounded by what was kept.
        let turn = &this.turn;
        let write_out = tokio::task::unconstrained(std::future::poll_fn(|cx| {
            turn.poll_write_out(cx);
            Poll::Ready(())
        }));
        let _ = std::pin::pin!(write_out).poll(cx);
        done
    }
}

/// Streams still in the inbox go with the drive: each holds this executor (hyper's
/// stream keeps a clone of it), so the inbox would otherwise own what owns it, and
/// a connection closed between a stream's start and its first poll would leak it.
impl<C> Drop for Drive<C> {
    fn drop(&mut self) {
        let unstarted = std::mem::take(&mut *self.inbox.new_streams());
        drop(unstarted);
    }
}

impl<C: Future> Drive<C> {
    fn take_turn(&mut self, cx: &mut Context<'_>) -> Poll<C::Output> {
        self.inbox.waker.register(cx.waker());
        for _ in 0..ROUNDS_PER_POLL {
            let new = std::mem::take(&mut *self.inbox.new_streams());
            self.running.extend(new);
            // Every stream that is ready queues its frames first...
            self.poll_streams(cx);
            // ...then the connection queues them, and may start new streams...
            if let Poll::Ready(done) = self.connection.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            if self.inbox.new_streams().is_empty() {
                return Poll::Pending;
            }
        }
        // A busy connection yields to the others; its new streams wait one turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Polls every ready stream. `FuturesUnordered` yields (wakes the task and
    /// returns `Pending`) after 32 polls, and as soon as two of the futures it
    /// polled woke themselves, which a stream sending data does: h2 wakes it for
    /// the send capacity it assigns during the send. Taken as the end of the
    /// turn, that cut a quote tick over 100 streams into some 50 turns and writes
    /// of two events each; here a yield means "poll again", up to one yield per
    /// running stream (each yield follows two polls at least).
    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        let yielded = Arc::new(Yielded {
            woken: AtomicBool::new(false),
            task: cx.waker().clone(),
        });
        let waker = futures_util::task::waker(Arc::clone(&yielded));
        let mut streams_cx = Context::from_waker(&waker);
        for _ in 0..self.running.len().max(1) {
            while let Poll::Ready(Some(())) = self.running.poll_next_unpin(&mut streams_cx) {}
            if !yielded.woken.swap(false, Ordering::Relaxed) {
                return;
            }
        }
    }
}

/// The task's waker, noting whether it was woken: a stream (or
/// `FuturesUnordered` yielding) asked to be polled again.
struct Yielded {
    woken: AtomicBool,
    task: Waker,
}

impl ArcWake for Yielded {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.woken.store(true, Ordering::Relaxed);
        arc_self.task.wake_by_ref();
    }
}

/// The end of a connection's turn: writes out what its socket kept.
pub(crate) trait Turn: Send + Sync {
    /// Writes out what the turn kept; on `Pending` the socket wakes the task.
    fn poll_write_out(&self, cx: &mut Context<'_>);
}

/// What the socket and the turn's writes share.
struct Kept<S> {
    socket: S,
    buf: BytesMut,
    /// The error of a write that failed at the end of a turn, for the
    /// connection's next write to see.
    failed: Option<io::ErrorKind>,
}

impl<S: AsyncWrite + Unpin> Kept<S> {
    /// Writes out the buffer, then flushes the socket (TLS sends its records then).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        // Before writing: `advance` takes what it passes off `capacity()`, so a
        // buffer written out shows none of the allocation it keeps.
        let grown = self.buf.capacity() > KEPT_BYTES;
        while self.buf.has_remaining() {
            let n = ready!(Pin::new(&mut self.socket).poll_write(cx, &self.buf))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.buf.advance(n);
        }
        if grown {
            self.buf = BytesMut::new();
        }
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    /// Room for `len` more bytes: what is kept is written out first when the
    /// buffer would pass [`TURN_BYTES`].
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if self.buf.len() + len > TURN_BYTES {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

/// An HTTP/2 connection's socket whose writes wait for the end of the turn
/// ([`Drive`]): hyper's writes and flushes fill a buffer, which the turn writes
/// out once. Reads, and a shutdown (after writing out), go straight through.
pub(crate) struct Coalesced<S> {
    kept: Arc<Mutex<Kept<S>>>,
}

impl<S> Coalesced<S> {
    /// `socket` with its writes kept, and the turn that writes them out.
    pub(crate) fn new(socket: S) -> (Coalesced<S>, Arc<dyn Turn>)
    where
        S: AsyncWrite + Unpin + Send + 'static,
    {
        let kept = Arc::new(Mutex::new(Kept {
            socket,
            buf: BytesMut::new(),
            failed: None,
        }));
        let turn: Arc<dyn Turn> = Arc::new(Coalesced {
            kept: Arc::clone(&kept),
        });
        (Coalesced { kept }, turn)
    }

    fn kept(&self) -> MutexGuard<'_, Kept<S>> {
        // Held only within one poll of the connection's own task.
        self.kept.lock().expect("the socket lock is never poisoned")
    }
}

impl<S: AsyncWrite + Unpin + Send> Turn for Coalesced<S> {
    fn poll_write_out(&self, cx: &mut Context<'_>) {
        let mut kept = self.kept();
        if kept.failed.is_some() {
            return;
        }
        if let Poll::Ready(Err(e)) = kept.poll_drain(cx) {
            kept.failed = Some(e.kind());
            // Once: the connection's next poll sees the error on its next read,
            // write or flush, and ends.
            cx.waker().wake_by_ref();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Coalesced<S> {
    /// Fails once a write-out has: a connection that cannot answer has nothing left
    /// to read for (h2 reading a client's preface would otherwise wait on).
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut kept = self.kept();
        if let Some(kind) = kept.failed {
            return Poll::Ready(Err(kind.into()));
        }
        Pin::new(&mut kept.socket).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Coalesced<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut kept = self.kept();
        ready!(kept.poll_room(cx, buf.len()))?;
        if buf.len() > TURN_BYTES {
            // Larger than a turn's buffer (a peer may allow DATA frames of up to
            // 16 MiB), with nothing kept (`poll_room` wrote it out): straight to
            // the socket, not copied.
            return Pin::new(&mut kept.socket).poll_write(cx, buf);
        }
        kept.buf.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        let mut kept = self.kept();
        ready!(kept.poll_room(cx, len))?;
        if len > TURN_BYTES {
            return Pin::new(&mut kept.socket).poll_write_vectored(cx, bufs);
        }
        for b in bufs {
            kept.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Done at the end of the turn ([`Drive`]), once for all of its writes.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.kept().failed {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut kept = self.kept();
        ready!(kept.poll_drain(cx))?;
        Pin::new(&mut kept.socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::Waker;

    type Log = Arc<Mutex<Vec<&'static str>>>;

    /// A turn with nothing kept.
    fn idle() -> Arc<dyn Turn> {
        struct Idle;
        impl Turn for Idle {
            fn poll_write_out(&self, _cx: &mut Context<'_>) {}
        }
        Arc::new(Idle)
    }

    /// A socket that notes each write it is given, refusing them once `fail` is set.
    #[derive(Clone, Default)]
    struct Wire {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
        shut: Arc<AtomicBool>,
        fail: Arc<AtomicBool>,
    }

    impl AsyncWrite for Wire {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.fail.load(Ordering::SeqCst) {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            self.writes.lock().unwrap().push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shut.store(true, Ordering::SeqCst);
            Poll::Ready(Ok(()))
        }
    }

    /// A peer that sends nothing.
    impl AsyncRead for Wire {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            _buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    /// Writes each of `frames` and flushes after each, as h2 does.
    fn write_frames(
        socket: &mut Coalesced<Wire>,
        cx: &mut Context<'_>,
        frames: &[&[u8]],
    ) -> io::Result<()> {
        for frame in frames {
            match Pin::new(&mut *socket).poll_write_vectored(cx, &[IoSlice::new(frame)]) {
                Poll::Ready(written) => assert_eq!(written?, frame.len()),
                Poll::Pending => unreachable!("the wire never waits"),
            }
            match Pin::new(&mut *socket).poll_flush(cx) {
                Poll::Ready(result) => result?,
                Poll::Pending => unreachable!("a flush waits for the turn, never for the socket"),
            }
        }
        Ok(())
    }

    /// What a connection writes and flushes in its turn leaves in one write, once the
    /// turn is over.
    #[test]
    fn a_turns_writes_leave_in_one_write() {
        let wire = Wire::default();
        let (mut socket, turn) = Coalesced::new(wire.clone());
        let executor = ConnExecutor::default();
        let connection = std::future::poll_fn(move |cx| {
            write_frames(&mut socket, cx, &[b"HEADERS ", b"DATA 1 ", b"DATA 2"]).unwrap();
            Poll::<()>::Pending
        });
        let mut drive = std::pin::pin!(executor.drive(connection, turn));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            *wire.writes.lock().unwrap(),
            [b"HEADERS DATA 1 DATA 2".to_vec()]
        );
    }

    /// Past `TURN_BYTES` a turn's writes go out before it ends; a shutdown writes out
    /// what is kept first.
    #[test]
    fn a_full_buffer_and_a_shutdown_write_out() {
        let wire = Wire::default();
        let (mut socket, _turn) = Coalesced::new(wire.clone());
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let frame = vec![7u8; TURN_BYTES / 2 + 1];
        write_frames(&mut socket, &mut cx, &[&frame, &frame]).unwrap();
        assert_eq!(
            wire.writes.lock().unwrap().len(),
            1,
            "the first frame went out"
        );
        assert!(Pin::new(&mut socket).poll_shutdown(&mut cx).is_ready());
        let writes = wire.writes.lock().unwrap();
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[1], frame, "written out before the shutdown");
        assert!(wire.shut.load(Ordering::SeqCst));
    }

    /// A buffer grown past `KEPT_BYTES` is let go once written out, though `advance`
    /// left its `capacity()` at nothing: the next turn starts from a small one.
    #[test]
    fn a_grown_buffer_is_let_go_once_written_out() {
        let wire = Wire::default();
        let (mut socket, turn) = Coalesced::new(wire.clone());
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let frame = vec![7u8; 2 * KEPT_BYTES];
        write_frames(&mut socket, &mut cx, &[&frame]).unwrap();
        turn.poll_write_out(&mut cx);
        write_frames(&mut socket, &mut cx, &[b"DATA"]).unwrap();
        assert!(
            socket.kept().buf.capacity() <= KEPT_BYTES,
            "{}",
            socket.kept().buf.capacity()
        );
        turn.poll_write_out(&mut cx);
        assert_eq!(*wire.writes.lock().unwrap(), [frame, b"DATA".to_vec()]);
    }

    /// A write larger than a turn's buffer goes to the socket as it is, after what
    /// was kept, and is not copied into the buffer.
    #[test]
    fn a_write_past_the_turns_buffer_goes_straight_out() {
        let wire = Wire::default();
        let (mut socket, _turn) = Coalesced::new(wire.clone());
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let large = vec![9u8; TURN_BYTES + 1];
        write_frames(&mut socket, &mut cx, &[b"HEADERS", &large]).unwrap();
        assert!(socket.kept().buf.capacity() < TURN_BYTES, "nothing copied");
        assert_eq!(*wire.writes.lock().unwrap(), [b"HEADERS".to_vec(), large]);
    }

    /// A socket that takes at most 7 bytes a write and waits on every other one: the
    /// connection's writes (kept, past a full buffer, and past a turn's buffer
    /// straight through) all reach it whole and in order, whatever the write-outs
    /// and writes that had to wait.
    #[test]
    fn short_writes_and_a_waiting_socket_lose_nothing() {
        #[derive(Clone, Default)]
        struct Trickle {
            got: Arc<Mutex<Vec<u8>>>,
            calls: Arc<AtomicUsize>,
        }
        impl AsyncWrite for Trickle {
            fn poll_write(
                self: Pin<&mut Self>,
                _cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                if self.calls.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
                    return Poll::Pending;
                }
                let n = buf.len().min(7);
                self.got.lock().unwrap().extend_from_slice(&buf[..n]);
                Poll::Ready(Ok(n))
            }
            fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
        }
        let wire = Trickle::default();
        let (mut socket, turn) = Coalesced::new(wire.clone());
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut sent = Vec::new();
        let sizes = [
            100,
            30_000,
            5,
            50_000,
            TURN_BYTES + 3,
            1,
            20_000,
            2 * TURN_BYTES,
        ];
        for (i, size) in sizes.into_iter().enumerate() {
            let frame: Vec<u8> = (0..size).map(|k| (i * 31 + k) as u8).collect();
            let mut at = 0;
            for _ in 0..1_000_000 {
                if at == frame.len() {
                    break;
                }
                match Pin::new(&mut socket).poll_write(&mut cx, &frame[at..]) {
                    Poll::Ready(written) => at += written.unwrap(),
                    // A full buffer waits for the socket: the turn writes it out.
                    Poll::Pending => turn.poll_write_out(&mut cx),
                }
            }
            assert_eq!(at, frame.len(), "frame {i} taken whole");
            sent.extend_from_slice(&frame);
        }
        for _ in 0..1_000_000 {
            if wire.got.lock().unwrap().len() >= sent.len() {
                break;
            }
            turn.poll_write_out(&mut cx);
        }
        assert!(*wire.got.lock().unwrap() == sent, "every byte, in order");
    }

    /// A turn whose streams use up the task's budget (tokio's, shared by everything
    /// the task polls: a tick waking more streams than it holds) still writes out
    /// what it queued in the same poll, instead of a task's turn later.
    #[test]
    fn streams_that_spend_the_budget_leave_the_write_out_its_turn() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (socket, mut peer) = tokio::io::duplex(1 << 20);
            let (mut socket, turn) = Coalesced::new(socket);
            let executor = ConnExecutor::default();
            for _ in 0..300 {
                executor.execute(async {
                    loop {
                        tokio::task::coop::consume_budget().await;
                    }
                });
            }
            let connection = std::future::poll_fn(move |cx| {
                let frame: &[u8] = b"DATA";
                assert!(Pin::new(&mut socket).poll_write(cx, frame).is_ready());
                Poll::<()>::Pending
            });
            let mut drive = std::pin::pin!(executor.drive(connection, turn));
            std::future::poll_fn(|cx| {
                assert!(drive.as_mut().poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            // A poll of its own for the peer's read, with the budget renewed.
            tokio::task::yield_now().await;
            let mut bytes = [0u8; 4];
            let mut buf = ReadBuf::new(&mut bytes);
            let waker = futures_util::task::noop_waker();
            let read = Pin::new(&mut peer).poll_read(&mut Context::from_waker(&waker), &mut buf);
            assert!(read.is_ready(), "written out in the same poll");
            assert_eq!(buf.filled(), b"DATA");
        });
    }

    /// A write-out that fails at the end of a turn is the connection's next write's
    /// error (and flush's), so hyper closes the connection.
    #[test]
    fn a_failed_write_out_reaches_the_connection() {
        let wire = Wire::default();
        let (mut socket, turn) = Coalesced::new(wire.clone());
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        write_frames(&mut socket, &mut cx, &[b"DATA"]).unwrap();
        wire.fail.store(true, Ordering::SeqCst);
        turn.poll_write_out(&mut cx);
        let error = write_frames(&mut socket, &mut cx, &[b"more"]);
        assert_eq!(error.map_err(|e| e.kind()), Err(io::ErrorKind::BrokenPipe));
    }

    /// After a failed write-out the connection is woken once, not on every turn, and
    /// its reads fail too: nothing is left to wait for.
    #[test]
    fn a_failed_write_out_wakes_once_and_fails_reads() {
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let wire = Wire::default();
        let (mut socket, turn) = Coalesced::new(wire.clone());
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        write_frames(&mut socket, &mut cx, &[b"DATA"]).unwrap();
        wire.fail.store(true, Ordering::SeqCst);
        for _ in 0..3 {
            turn.poll_write_out(&mut cx);
        }
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        let mut bytes = [0u8; 8];
        let mut buf = ReadBuf::new(&mut bytes);
        let read = Pin::new(&mut socket).poll_read(&mut cx, &mut buf);
        assert!(matches!(read, Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe));
    }

    /// A stream handed over and never polled goes when the drive is dropped, though
    /// it holds the executor whose inbox holds it (as hyper's streams do).
    #[test]
    fn unstarted_streams_go_with_the_drive() {
        struct Gone(Arc<AtomicBool>);
        impl Drop for Gone {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let executor = ConnExecutor::default();
        let gone = Arc::new(AtomicBool::new(false));
        let (held, mark) = (executor.clone(), Gone(Arc::clone(&gone)));
        executor.execute(async move {
            let _held = (held, mark);
        });
        let inbox = Arc::downgrade(&executor.inbox);
        let drive = executor.drive(std::future::pending::<()>(), idle());
        drop(executor);
        drop(drive);
        assert!(gone.load(Ordering::SeqCst), "the stream was dropped");
        assert!(inbox.upgrade().is_none(), "the inbox was freed");
    }

    /// What the streams wait for: a quote tick, opened from outside their task.
    #[derive(Default)]
    struct Tick {
        open: AtomicBool,
        wakers: Mutex<Vec<Waker>>,
    }

    impl Tick {
        fn fire(&self) {
            self.open.store(true, Ordering::SeqCst);
            for waker in self.wakers.lock().unwrap().drain(..) {
                waker.wake();
            }
        }
    }

    /// A stream that queues one frame when the tick comes, then ends.
    fn stream(tick: &Arc<Tick>, log: &Log) -> impl Future<Output = ()> + Send + 'static {
        let (tick, log) = (Arc::clone(tick), Arc::clone(log));
        std::future::poll_fn(move |cx| {
            if tick.open.load(Ordering::SeqCst) {
                log.lock().unwrap().push("frame");
                return Poll::Ready(());
            }
            tick.wakers.lock().unwrap().push(cx.waker().clone());
            Poll::Pending
        })
    }

    /// A connection that notes each poll (where it would write what is queued),
    /// and starts one stream on its first poll, as hyper does on a request.
    fn connection(
        executor: &ConnExecutor,
        tick: &Arc<Tick>,
        log: &Log,
    ) -> impl Future<Output = ()> {
        let (executor, tick, log) = (executor.clone(), Arc::clone(tick), Arc::clone(log));
        let mut first = true;
        std::future::poll_fn(move |_cx| {
            log.lock().unwrap().push("write");
            if std::mem::take(&mut first) {
                executor.execute(stream(&tick, &log));
            }
            Poll::Pending
        })
    }

    /// When a tick wakes a connection's streams, one poll of its task runs every
    /// one of them before the connection writes: their frames leave in one write.
    #[test]
    fn a_ticks_frames_are_queued_before_the_connection_writes() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        executor.execute(stream(&tick, &log));
        executor.execute(stream(&tick, &log));
        let mut drive = std::pin::pin!(executor.drive(connection(&executor, &tick, &log), idle()));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);

        assert!(drive.as_mut().poll(&mut cx).is_pending());
        // The stream started by the connection was polled in the same turn.
        assert_eq!(tick.wakers.lock().unwrap().len(), 3);
        assert_eq!(*log.lock().unwrap(), ["write", "write"]);

        tick.fire();
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            *log.lock().unwrap(),
            ["write", "write", "frame", "frame", "frame", "write"]
        );
    }

    /// When the tick comes, queues one frame and wakes itself, as a stream does
    /// that h2 gives send capacity during its send; polled again, it rests.
    fn sending_stream(tick: &Arc<Tick>, log: &Log) -> impl Future<Output = ()> + Send + 'static {
        let (tick, log) = (Arc::clone(tick), Arc::clone(log));
        let mut sent = false;
        std::future::poll_fn(move |cx| {
            if tick.open.load(Ordering::SeqCst) && !std::mem::replace(&mut sent, true) {
                log.lock().unwrap().push("frame");
                cx.waker().wake_by_ref();
            } else if !sent {
                tick.wakers.lock().unwrap().push(cx.waker().clone());
            }
            Poll::<()>::Pending
        })
    }

    /// Streams that wake themselves as they send (each of h2's sends does) make
    /// `FuturesUnordered` yield after two of them; the turn polls on, and the
    /// tick's 40 frames are all queued before the connection writes.
    #[test]
    fn streams_that_wake_themselves_do_not_cut_the_turn() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        for _ in 0..40 {
            executor.execute(sending_stream(&tick, &log));
        }
        let mut drive = std::pin::pin!(executor.drive(connection(&executor, &tick, &log), idle()));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        log.lock().unwrap().clear();

        tick.fire();
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        let log = log.lock().unwrap();
        // The connection's own stream (`stream`) queues one frame too.
        assert_eq!(log.len(), 42, "{log:?}");
        assert!(log[..41].iter().all(|e| *e == "frame"), "{log:?}");
        assert_eq!(log[41], "write");
    }

    /// A stream that panics ends alone; the connection's other streams go on.
    #[test]
    fn a_panicking_stream_ends_alone() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        executor.execute(async { panic!("a handler's bug") });
        executor.execute(stream(&tick, &log));
        let mut drive = std::pin::pin!(executor.drive(connection(&executor, &tick, &log), idle()));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        tick.fire();
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            *log.lock().unwrap(),
            ["write", "write", "frame", "frame", "write"]
        );
    }

    /// The drive ends with its connection, in a runtime as in the server.
    #[tokio::test]
    async fn the_drive_ends_with_the_connection() {
        let executor = ConnExecutor::default();
        let (tick, log) = (Arc::new(Tick::default()), Log::default());
        executor.execute(stream(&tick, &log));
        let mut polls = 0;
        let connection = std::future::poll_fn(move |cx| {
            polls += 1;
            if polls == 3 {
                return Poll::Ready(polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            executor.drive(connection, idle()),
        )
        .await;
        assert_eq!(ended, Ok(3));
    }

    /// A connection that keeps starting streams yields to the runtime after a few
    /// rounds instead of holding the worker.
    #[test]
    fn a_busy_connection_yields() {
        let executor = ConnExecutor::default();
        let done = Arc::new(AtomicUsize::new(0));
        let (spawner, counted) = (executor.clone(), Arc::clone(&done));
        let connection = std::future::poll_fn(move |_cx| {
            let counted = Arc::clone(&counted);
            spawner.execute(async move {
                counted.fetch_add(1, Ordering::SeqCst);
            });
            Poll::<()>::Pending
        });
        let mut drive = std::pin::pin!(executor.drive(connection, idle()));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(drive.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            done.load(Ordering::SeqCst),
            ROUNDS_PER_POLL - 1,
            "the last round's stream waits a turn"
        );
    }
}
