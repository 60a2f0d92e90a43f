//! The libvirt session: the connection, its event callbacks, libvirt's error handler and event
//! loop. Every call into libvirt's C library that the `virt` crate does not wrap safely is made
//! here (`virt::sys`, `unsafe`, the callbacks), and nowhere else in the project.

use super::cli::Cli;
use crate::host::Sourced;
use crate::libvirt::version::LibvirtVersion;
use std::os::raw::{c_int, c_void};
use std::sync::mpsc;
use std::time::Duration;
use virt::connect::Connect;
use virt::domain::Domain as VirDomain;
use virt::sys;

/// A guest's stored definition with its secrets (`VIR_DOMAIN_XML_INACTIVE |
/// VIR_DOMAIN_XML_SECURE`, so a VNC password survives a rewrite's round trip).
///
/// # Errors
/// libvirt's.
pub(super) fn stored_xml(dom: &VirDomain) -> Result<String, virt::error::Error> {
    dom.xml_desc(sys::VIR_DOMAIN_XML_INACTIVE | sys::VIR_DOMAIN_XML_SECURE)
}

/// A guest's stored definition without secrets (`VIR_DOMAIN_XML_INACTIVE`), for what the
/// snapshot needs to know of it.
///
/// # Errors
/// libvirt's.
pub(super) fn inactive_xml(dom: &VirDomain) -> Result<String, virt::error::Error> {
    dom.xml_desc(sys::VIR_DOMAIN_XML_INACTIVE)
}

/// A handler that drops libvirt's errors: they reach this program as `Result`s and are logged
/// through `tracing` or said once on stderr, never twice.
extern "C" fn ignore_libvirt_error(_opaque: *mut c_void, _error: sys::virErrorPtr) {}

/// Silence libvirt's default error handler, which prints every error on stderr (the process's
/// handler, so once is enough).
fn quiet_libvirt_errors() {
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        // SAFETY: installs a handler that does nothing; no pointer is kept.
        unsafe { sys::virSetErrorFunc(std::ptr::null_mut(), Some(ignore_libvirt_error)) };
    });
}

/// Open a connection to `uri`. Every path that talks to libvirt opens through here, so none of
/// them lets libvirt print its errors on stderr (an `apply` would say each twice, the daemon
/// would put lines without journal fields in the journal).
///
/// # Errors
/// libvirt's, when the connection cannot be opened.
pub(super) fn connect(uri: &str) -> Result<Connect, virt::error::Error> {
    quiet_libvirt_errors();
    Connect::open(Some(uri))
}

/// The libvirt version whose rules the daemon applies: the operator's `--libvirt-version`, else
/// the connected libvirtd's (`virConnectGetLibVersion`: a remote connection answers with the
/// daemon's version, not this library's). None when libvirt gives none: [`Host`] then falls
/// back to its files (a `<hostFacts>` read, libvirt's QEMU capability cache).
pub(super) fn libvirt_version(cli: &Cli, conn: &Connect) -> Option<Sourced<LibvirtVersion>> {
    if let Some(value) = cli.libvirt_version {
        return Some(Sourced {
            value,
            source: "--libvirt-version".into(),
        });
    }
    match conn.lib_version() {
        Ok(n) => Some(Sourced {
            value: LibvirtVersion::from_number(u64::from(n)),
            source: format!("virConnectGetLibVersion on {}", cli.uri),
        }),
        Err(e) => {
            tracing::warn!(uri = %cli.uri, error = %e, "the connected libvirtd gives no version");
            None
        }
    }
}

/// What the event callbacks send to the main loop.
pub(super) enum Event {
    /// A guest was defined (added or updated).
    Defined(String),
    /// The connection closed (libvirtd went away).
    Closed,
}

/// libvirt's `virConnectDomainEventLifecycleCallback`; registered through the generic callback
/// type, as libvirt's C API requires (`VIR_DOMAIN_EVENT_CALLBACK`).
type LifecycleCallback =
    unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, c_int, c_int, *mut c_void) -> c_int;

struct CallbackData {
    tx: mpsc::Sender<Event>,
}

extern "C" fn lifecycle_cb(
    _conn: sys::virConnectPtr,
    dom: sys::virDomainPtr,
    event: c_int,
    _detail: c_int,
    opaque: *mut c_void,
) -> c_int {
    if u32::try_from(event) != Ok(sys::VIR_DOMAIN_EVENT_DEFINED)
        || opaque.is_null()
        || dom.is_null()
    {
        return 0;
    }
    // SAFETY: `opaque` is the CallbackData boxed at registration and freed only by
    // `free_callback_data`, after libvirt stops calling; `dom` is valid during the call.
    let data = unsafe { &*opaque.cast::<CallbackData>() };
    // SAFETY: `dom` is a valid domain for the duration of the callback.
    let name = unsafe { sys::virDomainGetName(dom) };
    if !name.is_null() {
        // SAFETY: libvirt returns a NUL-terminated string owned by the domain object.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let _ = data.tx.send(Event::Defined(name));
    }
    0
}

extern "C" fn close_cb(_conn: sys::virConnectPtr, _reason: c_int, opaque: *mut c_void) {
    if opaque.is_null() {
        return;
    }
    // SAFETY: as in `lifecycle_cb`.
    let data = unsafe { &*opaque.cast::<CallbackData>() };
    let _ = data.tx.send(Event::Closed);
}

extern "C" fn free_callback_data(opaque: *mut c_void) {
    if !opaque.is_null() {
        // SAFETY: `opaque` came from Box::into_raw in `register`, and libvirt calls this once.
        drop(unsafe { Box::from_raw(opaque.cast::<CallbackData>()) });
    }
}

/// A connection with its event callbacks registered, and the libvirt version it judges with
/// (asked at each connection: a libvirtd upgraded and restarted brings its own rules).
pub(super) struct Session {
    pub(super) conn: Connect,
    callback_id: c_int,
    pub(super) libvirt: Option<Sourced<LibvirtVersion>>,
}

impl Session {
    pub(super) fn open(cli: &Cli, tx: &mpsc::Sender<Event>) -> Result<Session, String> {
        let conn = connect(&cli.uri).map_err(|e| e.to_string())?;
        // Keepalive makes libvirt notice a dead daemon and run the close callback.
        let _ = conn.set_keep_alive(5, 3);
        let lifecycle = c_int::try_from(sys::VIR_DOMAIN_EVENT_ID_LIFECYCLE)
            .map_err(|_| "libvirt's lifecycle event id is out of range".to_string())?;
        let data = Box::into_raw(Box::new(CallbackData { tx: tx.clone() })).cast::<c_void>();
        // SAFETY: the callback type matches VIR_DOMAIN_EVENT_ID_LIFECYCLE's signature
        // (virConnectDomainEventCallback); libvirt owns `data` and frees it with
        // `free_callback_data` on deregistration.
        let callback_id = unsafe {
            let cb: LifecycleCallback = lifecycle_cb;
            sys::virConnectDomainEventRegisterAny(
                conn.as_ptr(),
                std::ptr::null_mut(),
                lifecycle,
                Some(std::mem::transmute::<
                    LifecycleCallback,
                    unsafe extern "C" fn(sys::virConnectPtr, sys::virDomainPtr, *mut c_void),
                >(cb)),
                data,
                Some(free_callback_data),
            )
        };
        if callback_id < 0 {
            free_callback_data(data);
            return Err("cannot register for domain lifecycle events".into());
        }
        let close_data = Box::into_raw(Box::new(CallbackData { tx: tx.clone() })).cast::<c_void>();
        // SAFETY: as above, for virConnectRegisterCloseCallback.
        let rc = unsafe {
            sys::virConnectRegisterCloseCallback(
                conn.as_ptr(),
                Some(close_cb),
                close_data,
                Some(free_callback_data),
            )
        };
        if rc < 0 {
            free_callback_data(close_data);
        }
        let libvirt = libvirt_version(cli, &conn);
        Ok(Session {
            conn,
            callback_id,
            libvirt,
        })
    }

    pub(super) fn close(self) {
        // SAFETY: the id came from a successful registration on this connection.
        unsafe {
            sys::virConnectDomainEventDeregisterAny(self.conn.as_ptr(), self.callback_id);
            sys::virConnectUnregisterCloseCallback(self.conn.as_ptr(), Some(close_cb));
        }
        drop(self.conn);
    }
}

/// libvirt's default event loop, run on its own thread (the lifecycle and close callbacks are
/// called from it).
pub(super) fn start_libvirt_event_loop() -> Result<(), String> {
    quiet_libvirt_errors();
    virt::event::event_register_default_impl()
        .map_err(|e| format!("cannot start libvirt's event loop: {e}"))?;
    std::thread::spawn(|| {
        loop {
            if virt::event::event_run_default_impl().is_err() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    Ok(())
}
