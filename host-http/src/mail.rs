//! A message ready to send, and the seam that sends one at once: the outbox's e-mails are
//! rendered into [`RenderedMail`] by the delivery workers, and the dashboard's invitations are
//! sent through [`SendMail`], which the SMTP sender (`events::Mailer`) implements.

use futures_util::future::BoxFuture;

/// One message, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedMail {
    /// The stable `Message-ID` of the message.
    pub message_id: String,
    /// Recipients.
    pub to: Vec<String>,
    /// Subject.
    pub subject: String,
    /// Plain text.
    pub text: String,
    /// HTML alternative.
    pub html: String,
}

/// Sends a message now; `Err` says why it was not sent (never with the message's content).
pub trait SendMail: Send + Sync + std::fmt::Debug {
    /// Sends `mail`.
    fn send_mail<'a>(&'a self, mail: &'a RenderedMail) -> BoxFuture<'a, Result<(), String>>;
}
