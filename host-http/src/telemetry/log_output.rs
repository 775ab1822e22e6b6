//! Where the server's log thread writes: stderr, written out to its disk in small steps when
//! it is a regular file.
//!
//! The request log at its default level is about 180 bytes a request: a server answering
//! 90,000 reads a second leaves the kernel 16 MB of log a second to write out, which it does
//! in bursts of hundreds of megabytes once they are old enough. A database commit whose fsync
//! arrives during such a burst on the same disk waits behind it (creates' p99 went from 8 ms
//! to 16–25 ms after half a minute of reads, `docs/PERFORMANCE.md`). So, as PostgreSQL's
//! `*_flush_after` settings do for its own files, the log thread has every
//! [`FLUSH_AFTER`] bytes of a file written out (`fdatasync`): the disk sees a steady trickle,
//! and the wait is the log thread's, never a request's. A pipe, a terminal or `/dev/null` is
//! written to as before.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;

/// Bytes written between two `fdatasync` of a log file.
pub const FLUSH_AFTER: u64 = 4 << 20;

/// A writer that passes everything to `out` and, every [`FLUSH_AFTER`] bytes, writes the data
/// of `file` (the same open file as `out`, when that is a regular file) out to its disk.
#[derive(Debug)]
pub struct LogOutput<W> {
    out: W,
    file: Option<File>,
    unsynced: u64,
    syncs: u64,
}

impl LogOutput<io::Stderr> {
    /// The process's stderr, written out in steps when it is a regular file.
    pub fn stderr() -> LogOutput<io::Stderr> {
        let stderr = io::stderr();
        let file = regular_file(&stderr);
        LogOutput::new(stderr, file)
    }
}

impl<W: Write> LogOutput<W> {
    /// `out`, with `file` (the same open file) written out every [`FLUSH_AFTER`] bytes.
    pub fn new(out: W, file: Option<File>) -> LogOutput<W> {
        LogOutput {
            out,
            file,
            unsynced: 0,
            syncs: 0,
        }
    }

    /// Whether writes are followed by `fdatasync` of a file.
    pub fn syncs_a_file(&self) -> bool {
        self.file.is_some()
    }

    /// How many times the file was written out.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    fn wrote(&mut self, bytes: usize) {
        self.unsynced = self
            .unsynced
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
        if self.unsynced < FLUSH_AFTER {
            return;
        }
        self.unsynced = 0;
        let Some(file) = &self.file else { return };
        match file.sync_data() {
            Ok(()) => self.syncs += 1,
            // Nowhere to report it from the log's own thread; the log goes on unsynced.
            Err(_) => self.file = None,
        }
    }
}

impl<W: Write> Write for LogOutput<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.out.write(buf)?;
        self.wrote(written);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The open file behind `handle` as a [`File`], if it is a regular file.
pub fn regular_file(handle: &impl AsFd) -> Option<File> {
    let file = File::from(handle.as_fd().try_clone_to_owned().ok()?);
    file.metadata()
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|_| file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_file_is_written_out_every_few_megabytes_and_keeps_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        let file = File::create(&path).unwrap();
        let same = regular_file(&file).expect("a regular file");
        let mut output = LogOutput::new(file, Some(same));
        assert!(output.syncs_a_file());
        let line = [b'x'; 1000];
        let lines = 10_000;
        for _ in 0..lines {
            output.write_all(&line).unwrap();
        }
        output.flush().unwrap();
        let total = u64::try_from(lines * line.len()).unwrap();
        assert_eq!(output.syncs(), total / FLUSH_AFTER);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), total);
    }

    #[test]
    fn a_pipe_is_written_to_as_before() {
        let (reader, writer) = std::io::pipe().unwrap();
        assert!(regular_file(&writer).is_none());
        assert!(regular_file(&reader).is_none());
        let file = regular_file(&writer);
        let mut output = LogOutput::new(writer, file);
        assert!(!output.syncs_a_file());
        output.write_all(b"line\n").unwrap();
        drop(output);
        let mut text = String::new();
        io::Read::read_to_string(&mut { reader }, &mut text).unwrap();
        assert_eq!(text, "line\n");
    }
}
