//! Attribute macros of upcxx-extra-nvshmem's C ABI.
//!
//! - [`macro@export`]: the panic boundary. Every function of the C ABI is written
//!   `#[unsafe(no_mangle)] #[export] pub extern "C" fn upcxx_extra_nvshmem_...`; the macro runs
//!   the body inside `crate::status::guarded` (what a panic returns is chosen by the return type)
//!   and is the only thing that may allow the `no_mangle`: the library denies `unsafe_code`, so an
//!   export written plainly does not compile. It also leaves the export's name in the library's
//!   `upcxx_extra_nvshmem_exports` section, the record the library's `tests/build_exports.rs`
//!   requires of every exported function. cbindgen reads the function as written.
//! - [`macro@c_enum`]: one written-out `#[repr(C)]` enum (what cbindgen reads, variants spelled
//!   as in C) is the one table of a C enum: the macro derives the short Rust names
//!   (`Status::NullArgument`), `ALL`, `name()`, `from_u32()` and, from `#[description(c"...")]`
//!   on each variant, `description()`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::{format_ident, quote};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, Fields, FnArg, ItemEnum, ItemFn, Lit, LitStr, Meta, Pat, ReturnType, Token, Visibility};

const PREFIX: &str = "upcxx_extra_nvshmem_";

fn err(span: Span, msg: &str) -> syn::Error {
    syn::Error::new(span, msg)
}

fn expand(r: syn::Result<proc_macro2::TokenStream>) -> TokenStream {
    r.unwrap_or_else(syn::Error::into_compile_error).into()
}

/// The attribute's arguments: `a = b, c, ...`.
fn args(attr: TokenStream) -> syn::Result<Punctuated<Meta, Token![,]>> {
    Punctuated::<Meta, Token![,]>::parse_terminated.parse(attr)
}

/// A string literal argument.
fn lit_str(e: &Expr, what: &str) -> syn::Result<LitStr> {
    match e {
        Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        _ => Err(err(Span::call_site(), &format!("{what} takes a string"))),
    }
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
///   an export. `body` has type `<R as crate::status::Boundary>::Body` (for a status:
///   `Result<()>`, so `?` works); it runs inside `catch_unwind`, and a panic returns the fallback
///   of `R`.
/// - `#[export(slow = f)]` on an export: `body` is the hot path, returns `bool` (true: done) and
///   runs inside `catch_unwind`; on false the function tail-calls `f` with the same arguments.
/// - `#[export(name = "upcxx_extra_nvshmem_x")] extern "C" fn f(..)` (private, no `no_mangle`):
///   such a slow path, a full boundary whose errors name the export it serves.
///
/// The allowance it adds is what makes the boundary structural. With the crate denying
/// `unsafe_code` (as `src/lib.rs` does), an export through the macro compiles:
///
/// ```
/// #![deny(unsafe_code)]
/// # mod status { // a stand-in for the library's `status` module, which the expansion names
/// #     pub trait Boundary { type Body; }
/// #     impl Boundary for i32 { type Body = i32; }
/// #     pub fn guarded<R: Boundary<Body = R>>(_: &'static str, f: impl FnOnce() -> R) -> R { f() }
/// # }
/// use upcxx_extra_nvshmem_macros::export;
///
/// #[unsafe(no_mangle)]
/// #[export]
/// pub extern "C" fn upcxx_extra_nvshmem_answer() -> i32 { 42 }
/// # fn main() { assert_eq!(upcxx_extra_nvshmem_answer(), 42); }
/// ```
///
/// and the same export without it does not (`declaration of a no_mangle function`):
///
/// ```compile_fail
/// #![deny(unsafe_code)]
/// # mod status {
/// #     pub trait Boundary { type Body; }
/// #     impl Boundary for i32 { type Body = i32; }
/// #     pub fn guarded<R: Boundary<Body = R>>(_: &'static str, f: impl FnOnce() -> R) -> R { f() }
/// # }
/// #[unsafe(no_mangle)]
/// pub extern "C" fn upcxx_extra_nvshmem_answer() -> i32 { 42 }
/// # fn main() {}
/// ```
///
/// A hot path and its slow path, which must be a boundary itself (`#[export(name = ...)]`):
///
/// ```
/// # mod status {
/// #     pub trait Boundary { type Body; }
/// #     impl Boundary for i32 { type Body = i32; }
/// #     pub fn guarded<R: Boundary<Body = R>>(_: &'static str, f: impl FnOnce() -> R) -> R { f() }
/// #     pub fn boundary_hot(_: &'static str, fast: impl FnOnce() -> bool, slow: impl FnOnce() -> i32) -> i32 {
/// #         if fast() { 0 } else { slow() }
/// #     }
/// # }
/// use upcxx_extra_nvshmem_macros::export;
///
/// #[export(name = "upcxx_extra_nvshmem_hot")]
/// extern "C" fn slow_path(x: i32) -> i32 { x }
///
/// #[unsafe(no_mangle)]
/// #[export(slow = slow_path)]
/// pub extern "C" fn upcxx_extra_nvshmem_hot(x: i32) -> i32 { x > 0 }
/// # fn main() { assert_eq!(upcxx_extra_nvshmem_hot(5), 0); assert_eq!(upcxx_extra_nvshmem_hot(-3), -3); }
/// ```
///
/// A plain function as the slow path does not compile:
///
/// ```compile_fail
/// # mod status {
/// #     pub fn boundary_hot(_: &'static str, fast: impl FnOnce() -> bool, slow: impl FnOnce() -> i32) -> i32 {
/// #         if fast() { 0 } else { slow() }
/// #     }
/// # }
/// extern "C" fn slow_path(x: i32) -> i32 { x }
///
/// #[unsafe(no_mangle)]
/// #[upcxx_extra_nvshmem_macros::export(slow = slow_path)]
/// pub extern "C" fn upcxx_extra_nvshmem_hot(x: i32) -> i32 { x > 0 }
/// # fn main() {}
/// ```
///
/// A misnamed export is refused too:
///
/// ```compile_fail
/// # mod status {
/// #     pub trait Boundary { type Body; }
/// #     impl Boundary for i32 { type Body = i32; }
/// #     pub fn guarded<R: Boundary<Body = R>>(_: &'static str, f: impl FnOnce() -> R) -> R { f() }
/// # }
/// #[unsafe(no_mangle)]
/// #[upcxx_extra_nvshmem_macros::export]
/// pub extern "C" fn answer() -> i32 { 42 }
/// # fn main() {}
/// ```
#[proc_macro_attribute]
pub fn export(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(export_impl(attr, item))
}

fn export_impl(attr: TokenStream, item: TokenStream) -> syn::Result<proc_macro2::TokenStream> {
    let mut f: ItemFn = syn::parse(item)?;
    let mut slow = None;
    let mut name_override = None;
    for a in args(attr)? {
        match a {
            Meta::NameValue(nv) if nv.path.is_ident("slow") => slow = Some(nv.value),
            Meta::NameValue(nv) if nv.path.is_ident("name") => name_override = Some(lit_str(&nv.value, "export: `name`")?),
            _ => return Err(err(Span::call_site(), "export: expected `slow = path` or `name = \"...\"`")),
        }
    }
    let sig = &f.sig;
    let ident = &sig.ident;
    let abi_c = sig.abi.as_ref().and_then(|a| a.name.as_ref()).is_some_and(|n| n.value() == "C");
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
    let name = if exported {
        if !matches!(f.vis, Visibility::Public(_)) {
            return Err(err(ident.span(), "export: a `no_mangle` function must be `pub`"));
        }
        if !ident.to_string().starts_with(PREFIX) {
            return Err(err(ident.span(), "export: exported names start with `upcxx_extra_nvshmem_`"));
        }
        if name_override.is_some() {
            return Err(err(ident.span(), "export: `name` is for private slow paths; an export is named by itself"));
        }
        LitStr::new(&ident.to_string(), ident.span())
    } else {
        if matches!(f.vis, Visibility::Public(_)) {
            return Err(err(ident.span(), "export: without `no_mangle` the function is a private slow path (not `pub`)"));
        }
        if slow.is_some() {
            return Err(err(ident.span(), "export: `slow` is for exports"));
        }
        match name_override {
            Some(n) if n.value().starts_with(PREFIX) => n,
            _ => {
                return Err(err(
                    ident.span(),
                    "export: a private slow path needs `name = \"upcxx_extra_nvshmem_...\"` (the export it serves)",
                ));
            }
        }
    };
    let ret = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, t) => quote!(#t),
    };
    let body = &f.block;
    // An export leaves its name in the library's `upcxx_extra_nvshmem_exports` section: the
    // record `tests/build_exports.rs` requires of every symbol the built library exports, so an
    // export that bypasses this macro is caught even where the lint was allowed by hand.
    let record = if exported {
        let bytes = format!("{}\0", name.value()).into_bytes();
        let len = bytes.len();
        let lit = syn::LitByteStr::new(&bytes, ident.span());
        quote! {
            #[used]
            #[unsafe(link_section = "upcxx_extra_nvshmem_exports")]
            static UPCXX_EXTRA_NVSHMEM_EXPORT: [u8; #len] = *#lit;
        }
    } else {
        quote!()
    };
    let new_body = match slow {
        None => quote!({
            #record
            crate::status::guarded::<#ret>(#name, move || -> <#ret as crate::status::Boundary>::Body #body)
        }),
        Some(slow) => {
            // The slow path must itself be a boundary: `#[export(name = ...)]` leaves a marker
            // constant beside it, which this names, so a plain function does not compile here.
            let Expr::Path(path) = &slow else { return Err(err(ident.span(), "export(slow): name a function")) };
            let Some(last) = path.path.segments.last() else { return Err(err(ident.span(), "export(slow): name a function")) };
            let marker = marker_of(&last.ident);
            let mut names = Vec::new();
            for input in &sig.inputs {
                match input {
                    FnArg::Typed(t) => match &*t.pat {
                        Pat::Ident(p) => names.push(p.ident.clone()),
                        _ => return Err(err(ident.span(), "export(slow): arguments must be plain names")),
                    },
                    FnArg::Receiver(_) => return Err(err(ident.span(), "export: no `self`")),
                }
            }
            quote!({
                #record
                let () = #marker;
                crate::status::boundary_hot(#name, move || -> bool #body, move || #slow(#(#names),*))
            })
        }
    };
    f.block = Box::new(syn::parse2(new_body)?);
    // The one allowance of `unsafe_code` for `no_mangle` (and for the body's pointer writes).
    f.attrs.push(syn::parse_quote!(#[allow(unsafe_code)]));
    if exported {
        Ok(quote!(#f))
    } else {
        let marker = marker_of(&f.sig.ident);
        Ok(quote! {
            #f
            #[doc(hidden)]
            #[allow(non_upper_case_globals)]
            const #marker: () = ();
        })
    }
}

/// The constant `#[export(name = ...)]` leaves beside a slow path `f`: `__uxn_boundary_f`.
fn marker_of(f: &proc_macro2::Ident) -> proc_macro2::Ident {
    format_ident!("__uxn_boundary_{}", f)
}

/// One C enum, written out once (what cbindgen reads; variants spelled as in C, e.g.
/// `UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT = 1`), as the table everything else comes from.
///
/// `#[c_enum(prefix = "UPCXX_EXTRA_NVSHMEM_STATUS_")]` generates, on the enum:
/// - a constant per variant named in Rust style (`NullArgument`), for Rust code;
/// - `ALL` (every value, in the order written), `name()` (the C name without prefix, e.g.
///   `NULL_ARGUMENT`; `lowercase` in the attribute gives `null_argument`), `from_u32()`;
/// - `description()` (a `&'static CStr`) when every variant carries `#[description(c"...")]`.
///
/// ```
/// #[upcxx_extra_nvshmem_macros::c_enum(prefix = "MY_STATUS_")]
/// #[repr(C)]
/// #[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// pub enum my_status_t {
///     #[description(c"success")]
///     MY_STATUS_OK = 0,
///     #[description(c"a required pointer argument is NULL")]
///     MY_STATUS_NULL_ARGUMENT = 1,
/// }
/// # fn main() {
/// assert_eq!(my_status_t::NullArgument, my_status_t::MY_STATUS_NULL_ARGUMENT);
/// assert_eq!(my_status_t::NullArgument.name(), "NULL_ARGUMENT");
/// assert_eq!(my_status_t::Ok.description(), c"success");
/// assert_eq!(my_status_t::from_u32(1), Some(my_status_t::NullArgument));
/// assert_eq!(my_status_t::from_u32(2), None);
/// assert_eq!(my_status_t::ALL.len(), 2);
/// # }
/// ```
///
/// A variant outside the prefix, or a description on some variants only, does not compile:
///
/// ```compile_fail
/// #[upcxx_extra_nvshmem_macros::c_enum(prefix = "MY_STATUS_")]
/// #[repr(C)]
/// pub enum my_status_t { MY_STATUS_OK = 0, OTHER_BAD = 1 }
/// # fn main() {}
/// ```
#[proc_macro_attribute]
pub fn c_enum(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(c_enum_impl(attr, item))
}

fn c_enum_impl(attr: TokenStream, item: TokenStream) -> syn::Result<proc_macro2::TokenStream> {
    let mut e: ItemEnum = syn::parse(item)?;
    let mut prefix = None;
    let mut lowercase = false;
    for a in args(attr)? {
        match a {
            Meta::NameValue(nv) if nv.path.is_ident("prefix") => prefix = Some(lit_str(&nv.value, "c_enum: `prefix`")?.value()),
            Meta::Path(p) if p.is_ident("lowercase") => lowercase = true,
            _ => return Err(err(Span::call_site(), "c_enum: expected `prefix = \"...\"` and optionally `lowercase`")),
        }
    }
    let Some(prefix) = prefix else { return Err(err(Span::call_site(), "c_enum: `prefix = \"...\"` is required")) };
    let ty = &e.ident;
    let mut variants = Vec::new();
    let mut shorts = Vec::new();
    let mut names = Vec::new();
    let mut descriptions = Vec::new();
    for v in e.variants.iter_mut() {
        if !matches!(v.fields, Fields::Unit) || v.discriminant.is_none() {
            return Err(err(v.ident.span(), "c_enum: variants are `NAME = value`"));
        }
        let full = v.ident.to_string();
        let Some(short) = full.strip_prefix(&prefix) else {
            return Err(err(v.ident.span(), &format!("c_enum: variant does not start with {prefix}")));
        };
        let camel: String = short
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next().map_or(String::new(), |f| f.to_string() + &c.as_str().to_lowercase())
            })
            .collect();
        let mut description = None;
        let mut kept = Vec::new();
        for a in v.attrs.drain(..) {
            if a.path().is_ident("description") {
                match a.parse_args::<Lit>() {
                    Ok(Lit::CStr(c)) => description = Some(c),
                    _ => return Err(err(v.ident.span(), "c_enum: `description(c\"...\")` takes a C string literal")),
                }
            } else {
                kept.push(a);
            }
        }
        v.attrs = kept;
        variants.push(v.ident.clone());
        shorts.push(format_ident!("{}", camel, span = v.ident.span()));
        names.push(if lowercase { short.to_lowercase() } else { short.to_string() });
        descriptions.push(description);
    }
    let description_fn = if descriptions.iter().all(Option::is_some) && !descriptions.is_empty() {
        let d = descriptions.iter().map(|d| d.as_ref().unwrap());
        quote! {
            /// The static, NUL-terminated description of the value.
            pub fn description(self) -> &'static ::std::ffi::CStr {
                match self { #(Self::#variants => #d,)* }
            }
        }
    } else if descriptions.iter().any(Option::is_some) {
        return Err(err(ty.span(), "c_enum: give every variant a description, or none"));
    } else {
        quote!()
    };
    e.attrs.push(syn::parse_quote!(#[allow(non_camel_case_types)]));
    let count = variants.len();
    let doc_all = format!("Every `{ty}`, in the order written.");
    Ok(quote! {
        #e

        #[allow(non_upper_case_globals)]
        impl #ty {
            #(pub const #shorts: Self = Self::#variants;)*

            #[doc = #doc_all]
            pub const ALL: [Self; #count] = [#(Self::#variants),*];

            /// The C name without its prefix, as in the header.
            pub fn name(self) -> &'static str {
                match self { #(Self::#variants => #names,)* }
            }

            /// The value with this number, if any.
            pub fn from_u32(v: u32) -> ::std::option::Option<Self> {
                Self::ALL.iter().copied().find(|s| *s as u32 == v)
            }

            #description_fn
        }
    })
}
