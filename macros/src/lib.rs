//! The attribute macro of upcxx-extra-nvshmem's C ABI: [`macro@export`], the panic boundary.
//!
//! Every function of the C ABI is written `#[unsafe(no_mangle)] #[export] pub extern "C" fn
//! upcxx_extra_nvshmem_...`; the macro runs the body inside `crate::panic::guarded` (what a
//! panic returns is chosen by the return type) and is the only thing that may allow the
//! `no_mangle`: the library denies `unsafe_code`, so an export written plainly does not compile.
//! It also leaves the export's name in the library's `upcxx_extra_nvshmem_exports` section, the
//! record the library's `tests/build_exports.rs` requires of every exported function. cbindgen
//! reads the function as written.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ItemFn, Lit, LitStr, Meta, Token, Visibility};

const PREFIX: &str = "upcxx_extra_nvshmem_";

fn err(span: Span, msg: &str) -> syn::Error {
    syn::Error::new(span, msg)
}

fn is_no_mangle(a: &syn::Attribute) -> bool {
    // `#[unsafe(no_mangle)]` (edition 2024) or `#[no_mangle]`.
    let m = &a.meta;
    let text = quote!(#m).to_string().replace(' ', "");
    text == "no_mangle" || text == "unsafe(no_mangle)"
}

/// The panic boundary of a C ABI function.
///
/// Forms:
/// - `#[unsafe(no_mangle)] #[export] pub extern "C" fn upcxx_extra_nvshmem_x(..) -> R { body }`:
///   an export. The body runs inside `catch_unwind`, and a panic returns the fallback of `R`
///   (`crate::panic::Boundary`). The body evaluates to `R`, returned as it is, or (for a
///   status) to a `Result<()>`, whose error becomes its status with its message recorded,
///   named after the function (`crate::panic::Body`).
/// - `#[export(name = "upcxx_extra_nvshmem_x")] extern "C" fn f(..)` (private, no `no_mangle`):
///   the same boundary around a helper of that export (a hot path's slow path), whose errors
///   are named after the export.
///
/// With the crate denying `unsafe_code` (as `src/lib.rs` does), an export through the macro
/// compiles:
///
/// ```
/// #![deny(unsafe_code)]
/// # mod panic { // a stand-in for the library's `panic` module, which the expansion names
/// #     pub trait Body<R> { fn finish(self, name: &'static str) -> R; }
/// #     impl Body<i32> for i32 { fn finish(self, _: &'static str) -> i32 { self } }
/// #     pub fn guarded<R, B: Body<R>>(name: &'static str, f: impl FnOnce() -> B) -> R { f().finish(name) }
/// # }
/// use upcxx_extra_nvshmem_macros::export;
///
/// #[unsafe(no_mangle)]
/// #[export]
/// pub extern "C" fn upcxx_extra_nvshmem_answer() -> i32 { 42 }
///
/// /// A private helper with the same boundary, named after the export it serves.
/// #[export(name = "upcxx_extra_nvshmem_answer")]
/// extern "C" fn answer_slowly(x: i32) -> i32 { x }
/// # fn main() { assert_eq!(upcxx_extra_nvshmem_answer(), 42); assert_eq!(answer_slowly(7), 7); }
/// ```
///
/// and the same export without it does not (`declaration of a no_mangle function`):
///
/// ```compile_fail
/// #![deny(unsafe_code)]
/// #[unsafe(no_mangle)]
/// pub extern "C" fn upcxx_extra_nvshmem_answer() -> i32 { 42 }
/// # fn main() {}
/// ```
///
/// A misnamed export is refused:
///
/// ```compile_fail
/// # mod panic {
/// #     pub trait Body<R> { fn finish(self, name: &'static str) -> R; }
/// #     impl Body<i32> for i32 { fn finish(self, _: &'static str) -> i32 { self } }
/// #     pub fn guarded<R, B: Body<R>>(name: &'static str, f: impl FnOnce() -> B) -> R { f().finish(name) }
/// # }
/// #[unsafe(no_mangle)]
/// #[upcxx_extra_nvshmem_macros::export]
/// pub extern "C" fn answer() -> i32 { 42 }
/// # fn main() {}
/// ```
///
/// and so is an export named with `export_name` (its name would escape the checks):
///
/// ```compile_fail
/// # mod panic {
/// #     pub trait Body<R> { fn finish(self, name: &'static str) -> R; }
/// #     impl Body<i32> for i32 { fn finish(self, _: &'static str) -> i32 { self } }
/// #     pub fn guarded<R, B: Body<R>>(name: &'static str, f: impl FnOnce() -> B) -> R { f().finish(name) }
/// # }
/// #[unsafe(export_name = "upcxx_extra_nvshmem_answer")]
/// #[upcxx_extra_nvshmem_macros::export(name = "upcxx_extra_nvshmem_answer")]
/// extern "C" fn answer() -> i32 { 42 }
/// # fn main() {}
/// ```
#[proc_macro_attribute]
pub fn export(attr: TokenStream, item: TokenStream) -> TokenStream {
    export_impl(attr, item).unwrap_or_else(syn::Error::into_compile_error).into()
}

fn export_impl(attr: TokenStream, item: TokenStream) -> syn::Result<proc_macro2::TokenStream> {
    let mut f: ItemFn = syn::parse(item)?;
    let mut name_override = None;
    for a in Punctuated::<Meta, Token![,]>::parse_terminated.parse(attr)? {
        match a {
            Meta::NameValue(nv) if nv.path.is_ident("name") => match nv.value {
                Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => name_override = Some(s),
                _ => return Err(err(Span::call_site(), "export: `name` takes a string")),
            },
            _ => return Err(err(Span::call_site(), "export: expected nothing or `name = \"...\"`")),
        }
    }
    let ident = &f.sig.ident;
    let abi_c = f.sig.abi.as_ref().and_then(|a| a.name.as_ref()).is_some_and(|n| n.value() == "C");
    if !abi_c {
        return Err(err(ident.span(), "export: the function must be `extern \"C\"`"));
    }
    if f.attrs.iter().any(|a| {
        let m = &a.meta;
        quote!(#m).to_string().contains("export_name")
    }) {
        return Err(err(ident.span(), "export: name the function itself (`no_mangle`), not `export_name`"));
    }
    let exported = f.attrs.iter().any(is_no_mangle);
    let name = match (exported, name_override) {
        (true, None) => {
            if !matches!(f.vis, Visibility::Public(_)) {
                return Err(err(ident.span(), "export: a `no_mangle` function must be `pub`"));
            }
            if !ident.to_string().starts_with(PREFIX) {
                return Err(err(ident.span(), "export: exported names start with `upcxx_extra_nvshmem_`"));
            }
            LitStr::new(&ident.to_string(), ident.span())
        }
        (true, Some(_)) => return Err(err(ident.span(), "export: an export is named by itself, not by `name`")),
        (false, Some(n)) if n.value().starts_with(PREFIX) && !matches!(f.vis, Visibility::Public(_)) => n,
        (false, _) => {
            return Err(err(
                ident.span(),
                "export: without `no_mangle`, a private helper with `name = \"upcxx_extra_nvshmem_...\"` (the export it serves)",
            ));
        }
    };
    // An export leaves its name in the library's `upcxx_extra_nvshmem_exports` section: the
    // record `tests/build_exports.rs` requires of every symbol the built library exports, so an
    // export that bypasses this macro is caught even where the lint was allowed by hand.
    let record = exported.then(|| {
        let bytes = format!("{}\0", name.value()).into_bytes();
        let len = bytes.len();
        let lit = syn::LitByteStr::new(&bytes, ident.span());
        quote! {
            #[used]
            #[unsafe(link_section = "upcxx_extra_nvshmem_exports")]
            static UPCXX_EXTRA_NVSHMEM_EXPORT: [u8; #len] = *#lit;
        }
    });
    let body = &f.block;
    *f.block = syn::parse2(quote!({
        #record
        crate::panic::guarded(#name, move || #body)
    }))?;
    // The one allowance of `unsafe_code` for `no_mangle` (and for the body's pointer writes).
    f.attrs.push(syn::parse_quote!(#[allow(unsafe_code)]));
    Ok(quote!(#f))
}
