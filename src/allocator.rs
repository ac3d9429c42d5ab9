//! The allocator of the binary (and of the app's bench): mimalloc, asked for plain blocks
//! whenever a layout's alignment is one every block has, and for aligned ones only beyond.
//!
//! The `mimalloc` crate asks `mi_malloc_aligned` for every layout. Since mimalloc 3, that call
//! serves a block over 1 KiB through its slow path, over-allocating unless the size class is
//! a power of two: a raw burst's request made four such allocations, about 1,500 instructions of
//! its 28k (callgrind, BENCHMARKS.md). Every mimalloc block starts on a word boundary, so a
//! layout aligned to a word at most, and to no more than its size, is a plain block.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc, mi_zalloc_aligned,
};

/// mimalloc with plain blocks for word-aligned layouts.
pub struct Mimalloc;

/// Whether any block of `size` bytes meets `align`: mimalloc's size classes are multiples of
/// a word, and its pages start on one.
fn plain_block_fits(size: usize, align: usize) -> bool {
    align <= std::mem::size_of::<usize>() && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes aligned and
// plain blocks alike); a plain block is used only where `plain_block_fits` says its alignment
// is met, an aligned one otherwise.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation calls take any size and a power-of-two alignment.
        unsafe {
            if plain_block_fits(layout.size(), layout.align()) {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if plain_block_fits(layout.size(), layout.align()) {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator; the new block keeps the layout's alignment.
        unsafe {
            if plain_block_fits(new_size, layout.align()) {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size across the small blocks' bound (1 KiB) and some past a page, at every
    /// alignment to a page: the block meets the alignment, holds its bytes, and keeps them
    /// through a reallocation.
    #[test]
    fn every_block_meets_its_layouts_alignment() {
        let sizes = (1..=1100).chain([1280, 1500, 2000, 2048, 3000, 4096, 8191, 65_537, 1 << 20]);
        for size in sizes {
            for align in (0..=12).map(|shift| 1usize << shift) {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                // SAFETY: a non-zero size; each block is freed with its own layout.
                unsafe {
                    let block = Mimalloc.alloc(layout);
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "size {size}, alignment {align}");
                    block.write_bytes(0xa5, size);
                    let grown = Mimalloc.realloc(block, layout, size * 2);
                    assert_eq!(grown as usize % align, 0, "grown from size {size}, alignment {align}");
                    assert_eq!(*grown.add(size - 1), 0xa5, "the bytes survive a reallocation");
                    Mimalloc.dealloc(grown, Layout::from_size_align(size * 2, align).expect("a valid layout"));
                    let zeroed = Mimalloc.alloc_zeroed(layout);
                    assert_eq!(zeroed as usize % align, 0);
                    assert!(std::slice::from_raw_parts(zeroed, size).iter().all(|byte| *byte == 0));
                    Mimalloc.dealloc(zeroed, layout);
                }
            }
        }
    }
}
