//! A log line built as a `String` by its caller, for modules that format
//! their message before deciding to log it.

pub(crate) fn log(msg: impl AsRef<str>) {
    log::info!("{}", msg.as_ref());
}
