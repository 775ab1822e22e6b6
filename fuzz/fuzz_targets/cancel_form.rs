//! The multipart cancellation forms (`PATCH /cancel`, `PATCH /cancel/{id}/invoice`, R-4.6,
//! ) through the real streaming parser, `host_http::http::multipart::
//! parse_cancellation_form`, with the boundary taken from a fuzzed `Content-Type`.
//!
//! Input layout: one flag byte, the `Content-Type` value up to the first `\n`, then the body.
//! Flag bits: 0 = which form (id in the form or in the path); 1 = small limits (so that the
//! 413 paths are reachable with short inputs); 2-4 = the body's chunk size (1, 2, 3, 7, 16,
//! 64, 512 bytes or all at once); 5 = the body stream fails after its last chunk; 6 = no
//! `Content-Type` at all.
//!
//! Properties: no panic and no hang; every refusal maps to 400, 413 or 415 with a message; an
//! accepted form has 1 to 500 `itemsOrder` entries, a `transactionId` exactly on the form that
//! carries it, a file where one is required, and a file no larger than the limit whose size,
//! bytes and hash agree.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::stream;
use host_http::http::multipart::{
    CancelForm, FormLimits, MAX_ITEMS_ORDER, MultipartError, parse_cancellation_form,
};
use libfuzzer_sys::fuzz_target;

const CHUNK_SIZES: [usize; 8] = [1, 2, 3, 7, 16, 64, 512, usize::MAX];

/// Polls a future to completion. The parser only ever waits on the body stream, which is
/// always ready, so a future that stays pending would be a hang (reported as a timeout).
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let form = if flags & 1 == 0 {
        CancelForm::WithIdInForm
    } else {
        CancelForm::WithIdInPath
    };
    let limits = if flags & 2 == 0 {
        FormLimits::default()
    } else {
        FormLimits {
            max_file_bytes: 64,
            max_text_field_bytes: 32,
            max_text_total_bytes: 96,
            max_parts: 8,
        }
    };
    let chunk_size = CHUNK_SIZES[usize::from((flags >> 2) & 7)];
    let fail_at_end = flags & 32 != 0;
    let no_content_type = flags & 64 != 0;

    let (content_type, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let content_type = String::from_utf8_lossy(content_type).into_owned();
    let content_type = (!no_content_type).then_some(content_type.as_str());

    let mut chunks: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(chunk_size.min(body.len().max(1)))
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    if fail_at_end {
        chunks.push(Err(std::io::Error::other("connection reset")));
    }

    let result = block_on(parse_cancellation_form(
        content_type,
        stream::iter(chunks),
        form,
        &limits,
    ));
    match result {
        Ok(parsed) => {
            let order = &parsed.request.items_order;
            assert!(!order.is_empty() && order.len() <= MAX_ITEMS_ORDER);
            assert_eq!(
                parsed.transaction_id.is_some(),
                form == CancelForm::WithIdInForm
            );
            if form == CancelForm::WithIdInForm {
                assert!(parsed.file.is_some(), "PATCH /cancel requires a file");
            }
            if let Some(file) = &parsed.file {
                assert!(file.size_bytes <= limits.max_file_bytes);
                assert_eq!(file.bytes.len() as u64, file.size_bytes);
                assert_eq!(file.sha256_hex.len(), 64);
            }
        }
        Err(error) => {
            assert!(matches!(error.status(), 400 | 413 | 415));
            assert!(!error.messages().is_empty());
            assert!(error.messages().iter().all(|m| !m.is_empty()));
            if content_type.is_none() {
                assert_eq!(error, MultipartError::NotMultipart);
            }
        }
    }
});
