//! `--use-vkgdr`: chunk memory in GPU device memory, mapped into the CPU's address space
//! (as katgpucbf does with vkgdr), so the receive threads' placement copy lands on the GPU
//! and the GPU backends copy a chunk device-to-device instead of uploading it over PCIe.
//!
//! How: Vulkan (loaded at run time, [`ffi`]) allocates `DEVICE_LOCAL | HOST_VISIBLE`
//! memory exportable as an opaque file descriptor on the physical device whose UUID is the
//! CUDA device's, maps it for the CPU (`vkMapMemory`), and CUDA imports the descriptor
//! (`cuImportExternalMemory`) and maps it as a device buffer. [`GpuMapped`] holds one such
//! allocation; a process-wide table of them lets the GPU backends find the device address
//! of chunk bytes ([`device_address`], [`copy_mapped_to_device`]) and lets host code read
//! them back by DMA rather than by CPU loads from the BAR ([`read_chunk_bytes`]).
//!
//! The mapping is write-combining and uncached for the CPU: it must be written in whole
//! runs and not read by the CPU (each read is a PCIe round trip) but for the one load per
//! hand-over to the GPU that flushes the posted writes ([`flush_posted_writes`]). [`plan`]
//! decides from a [`Probe`] whether it is used and says why not.

mod ffi;
mod plan;

pub use plan::{decide, pick_memory_type, plan, ChunkPlace, MemoryType, Probe, GPU_MAPPED_LOG};

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use cudarc::driver::{sys, CudaContext, CudaStream, DevicePtrMut, DriverError};

use ffi::*;

/// Why Vulkan could not be opened for chunk memory (each step of [`Vkgdr::open`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenError {
    /// The Vulkan loader or an instance with the external-memory extensions.
    #[error("{0}")]
    Vulkan(String),
    /// No Vulkan device that is the CUDA device, or it cannot be opened with
    /// VK_KHR_external_memory_fd.
    #[error("{0}")]
    Device(String),
    /// The device has no DEVICE_LOCAL | HOST_VISIBLE memory type.
    #[error("the GPU has no DEVICE_LOCAL | HOST_VISIBLE memory type")]
    NoMemoryType,
}

struct Fns {
    destroy_device: DestroyDevice,
    allocate_memory: AllocateMemory,
    free_memory: FreeMemory,
    map_memory: MapMemory,
    unmap_memory: UnmapMemory,
    get_memory_fd: GetMemoryFdKHR,
}

/// An open Vulkan device that is the CUDA device, and the memory type chunks come from.
pub struct Vkgdr {
    instance: VkInstance,
    destroy_instance: DestroyInstance,
    device: VkDevice,
    fns: Fns,
    /// The chosen memory type.
    pub memory: MemoryType,
    /// The Vulkan name of the device.
    pub name: String,
    ctx: Arc<CudaContext>,
}

// SAFETY: the handles are only used through Vulkan calls whose device parameter needs no
// external synchronisation (vkAllocateMemory, vkGetMemoryFdKHR); each allocation is freed
// once, by its owner; destruction happens in Drop with no other user left.
unsafe impl Send for Vkgdr {}
// SAFETY: as for Send.
unsafe impl Sync for Vkgdr {}

fn vk_err(what: &str, r: VkResult) -> String {
    format!("{what} failed (VkResult {r})")
}

impl Vkgdr {
    /// Opens the Vulkan device that is `ctx`'s CUDA device (same UUID), with the
    /// external-memory extensions, and picks its memory type for chunks.
    pub fn open(ctx: &Arc<CudaContext>) -> Result<Vkgdr, OpenError> {
        let uuid = cuda_uuid(ctx).map_err(OpenError::Device)?;
        let l = Loader::load().map_err(OpenError::Vulkan)?;
        let missing = |n: &str| OpenError::Vulkan(format!("Vulkan has no {n}"));
        // SAFETY: the type is vkCreateInstance's.
        let create: CreateInstance =
            unsafe { l.instance_fn(std::ptr::null_mut(), c"vkCreateInstance") }
                .ok_or_else(|| missing("vkCreateInstance"))?;
        let app = VkApplicationInfo {
            s_type: STYPE_APPLICATION_INFO,
            p_next: std::ptr::null(),
            p_application_name: c"gpucbf".as_ptr(),
            application_version: 0,
            p_engine_name: c"gpucbf".as_ptr(),
            engine_version: 0,
            api_version: VK_API_VERSION_1_1,
        };
        let exts: [*const c_char; 2] = [
            c"VK_KHR_external_memory_capabilities".as_ptr(),
            c"VK_KHR_get_physical_device_properties2".as_ptr(),
        ];
        let info = VkInstanceCreateInfo {
            s_type: STYPE_INSTANCE_CREATE_INFO,
            p_next: std::ptr::null(),
            flags: 0,
            p_application_info: &app,
            enabled_layer_count: 0,
            pp_enabled_layer_names: std::ptr::null(),
            enabled_extension_count: exts.len() as u32,
            pp_enabled_extension_names: exts.as_ptr(),
        };
        let mut instance: VkInstance = std::ptr::null_mut();
        // SAFETY: valid create info whose pointers outlive the call.
        let r = unsafe { create(&info, std::ptr::null(), &mut instance) };
        if r != VK_SUCCESS {
            return Err(OpenError::Vulkan(vk_err("vkCreateInstance", r)));
        }
        let destroy_instance: Option<DestroyInstance> =
            // SAFETY: the type is vkDestroyInstance's; the instance is live.
            unsafe { l.instance_fn(instance, c"vkDestroyInstance") };
        let Some(destroy_instance) = destroy_instance else {
            return Err(missing("vkDestroyInstance"));
        };
        // SAFETY: the instance was created above and nothing else uses it on failure.
        let fail = |e: OpenError| unsafe {
            destroy_instance(instance, std::ptr::null());
            e
        };
        let (phys, name) = match find_device(&l, instance, &uuid) {
            Ok(p) => p,
            Err(e) => return Err(fail(e)),
        };
        let memory = match memory_type(&l, instance, phys) {
            Some(m) => m,
            None => return Err(fail(OpenError::NoMemoryType)),
        };
        match open_device(&l, instance, phys) {
            Ok((device, fns)) => Ok(Vkgdr {
                instance,
                destroy_instance,
                device,
                fns,
                memory,
                name,
                ctx: ctx.clone(),
            }),
            Err(e) => Err(fail(e)),
        }
    }

    /// Allocates `len` (> 0) zeroed bytes of GPU memory mapped for the CPU.
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<GpuMapped, String> {
        let size = (len as u64)
            .checked_next_multiple_of(2 << 20)
            .ok_or("size overflows")?;
        let export = VkExportMemoryAllocateInfo {
            s_type: STYPE_EXPORT_MEMORY_ALLOCATE_INFO,
            p_next: std::ptr::null(),
            handle_types: HANDLE_TYPE_OPAQUE_FD,
        };
        let info = VkMemoryAllocateInfo {
            s_type: STYPE_MEMORY_ALLOCATE_INFO,
            p_next: (&export as *const VkExportMemoryAllocateInfo).cast(),
            allocation_size: size,
            memory_type_index: self.memory.index,
        };
        let mut mem: VkDeviceMemory = 0;
        // SAFETY: a live device and a valid allocate info chain.
        let r =
            unsafe { (self.fns.allocate_memory)(self.device, &info, std::ptr::null(), &mut mem) };
        if r != VK_SUCCESS {
            return Err(vk_err(&format!("vkAllocateMemory of {size} bytes"), r));
        }
        // From here on, GpuMapped's Drop releases what has been set up so far.
        let mut m = GpuMapped {
            vk: self.clone(),
            mem,
            host: std::ptr::null_mut(),
            ext: std::ptr::null_mut(),
            dev: 0,
            size: size as usize,
        };
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: maps the whole of our fresh allocation.
        let r = unsafe { (self.fns.map_memory)(self.device, mem, 0, VK_WHOLE_SIZE, 0, &mut host) };
        if r != VK_SUCCESS || host.is_null() {
            return Err(vk_err("vkMapMemory", r));
        }
        m.host = host.cast();
        let fd_info = VkMemoryGetFdInfoKHR {
            s_type: STYPE_MEMORY_GET_FD_INFO_KHR,
            p_next: std::ptr::null(),
            memory: mem,
            handle_type: HANDLE_TYPE_OPAQUE_FD,
        };
        let mut fd = -1;
        // SAFETY: the allocation was made exportable as an opaque fd.
        let r = unsafe { (self.fns.get_memory_fd)(self.device, &fd_info, &mut fd) };
        if r != VK_SUCCESS {
            return Err(vk_err("vkGetMemoryFdKHR", r));
        }
        self.ctx
            .bind_to_thread()
            .map_err(|e| format!("CUDA context: {e:?}"))?;
        // Built field by field: the handle type is a Rust enum with no zero value, so the
        // descriptor cannot be made by zeroing (that aborts the process). The union's
        // widest member is zeroed first, then the descriptor is set.
        let mut handle = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 {
            win32: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1__bindgen_ty_1 {
                handle: std::ptr::null_mut(),
                name: std::ptr::null(),
            },
        };
        handle.fd = fd;
        let desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
            type_: sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            handle,
            size,
            flags: 0,
            reserved: [0; 16],
        };
        // SAFETY: imports the fd just exported; on success CUDA owns it.
        let r = unsafe { sys::cuImportExternalMemory(&mut m.ext, &desc) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the fd is ours still (the import failed).
            unsafe { libc::close(fd) };
            return Err(format!("cuImportExternalMemory failed ({r:?})"));
        }
        let buf = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC {
            offset: 0,
            size,
            flags: 0,
            reserved: [0; 16],
        };
        // SAFETY: maps the whole imported allocation as one buffer.
        let r = unsafe { sys::cuExternalMemoryGetMappedBuffer(&mut m.dev, m.ext, &buf) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuExternalMemoryGetMappedBuffer failed ({r:?})"));
        }
        // SAFETY: the buffer is `size` bytes of device memory of ours.
        let r = unsafe { sys::cuMemsetD8_v2(m.dev, 0, m.size) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuMemsetD8 failed ({r:?})"));
        }
        // A memset of device memory returns before the GPU has done it: wait for it (it ran
        // on the legacy default stream), or it would zero over the first packets the
        // receive threads write through the mapping.
        // SAFETY: the null stream is the context's legacy default stream.
        let r = unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("waiting for cuMemsetD8 failed ({r:?})"));
        }
        register(m.host as usize, m.size, m.dev, &self.ctx);
        Ok(m)
    }
}

impl Drop for Vkgdr {
    fn drop(&mut self) {
        // SAFETY: every allocation holds an Arc to us, so none is left; destroyed once.
        unsafe {
            (self.fns.destroy_device)(self.device, std::ptr::null());
            (self.destroy_instance)(self.instance, std::ptr::null());
        }
    }
}

/// The CUDA device's UUID.
fn cuda_uuid(ctx: &CudaContext) -> Result<[u8; 16], String> {
    let mut u = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: a query about the context's device, writing `u`.
    let r = unsafe { sys::cuDeviceGetUuid_v2(&mut u, ctx.cu_device()) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDeviceGetUuid failed ({r:?})"));
    }
    Ok(u.bytes.map(|b| b as u8))
}

/// The physical device whose deviceUUID is `uuid`, and its name.
fn find_device(
    l: &Loader,
    instance: VkInstance,
    uuid: &[u8; 16],
) -> Result<(VkPhysicalDevice, String), OpenError> {
    let miss = |n: &str| OpenError::Vulkan(format!("Vulkan has no {n}"));
    // SAFETY (both): the types are the functions'; the instance is live.
    let enumerate: EnumeratePhysicalDevices =
        unsafe { l.instance_fn(instance, c"vkEnumeratePhysicalDevices") }
            .ok_or_else(|| miss("vkEnumeratePhysicalDevices"))?;
    let props2: GetPhysicalDeviceProperties2 =
        unsafe { l.instance_fn(instance, c"vkGetPhysicalDeviceProperties2") }
            .or_else(|| unsafe { l.instance_fn(instance, c"vkGetPhysicalDeviceProperties2KHR") })
            .ok_or_else(|| miss("vkGetPhysicalDeviceProperties2"))?;
    let mut n = 0u32;
    // SAFETY: the count query.
    let r = unsafe { enumerate(instance, &mut n, std::ptr::null_mut()) };
    if r != VK_SUCCESS {
        return Err(OpenError::Vulkan(vk_err("vkEnumeratePhysicalDevices", r)));
    }
    let mut devs = vec![std::ptr::null_mut(); n as usize];
    // SAFETY: room for `n` handles.
    let r = unsafe { enumerate(instance, &mut n, devs.as_mut_ptr()) };
    if r != VK_SUCCESS && r != VK_INCOMPLETE {
        return Err(OpenError::Vulkan(vk_err("vkEnumeratePhysicalDevices", r)));
    }
    devs.truncate(n as usize);
    for &d in &devs {
        let mut id = VkPhysicalDeviceIDProperties {
            s_type: STYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
            p_next: std::ptr::null_mut(),
            device_uuid: [0; 16],
            driver_uuid: [0; 16],
            device_luid: [0; 8],
            device_node_mask: 0,
            device_luid_valid: 0,
        };
        let mut p = VkPhysicalDeviceProperties2 {
            s_type: STYPE_PHYSICAL_DEVICE_PROPERTIES_2,
            p_next: (&mut id as *mut VkPhysicalDeviceIDProperties).cast(),
            properties: [0; 128],
        };
        // SAFETY: a live physical device; the chain is ours and outlives the call.
        unsafe { props2(d, &mut p) };
        if &id.device_uuid == uuid {
            return Ok((d, p.device_name()));
        }
    }
    Err(OpenError::Device(format!(
        "none of the {} Vulkan devices is the CUDA device (no deviceUUID match)",
        devs.len()
    )))
}

/// The chunk memory type of `phys` ([`pick_memory_type`]).
fn memory_type(l: &Loader, instance: VkInstance, phys: VkPhysicalDevice) -> Option<MemoryType> {
    // SAFETY: the type is the function's; the instance is live.
    let get: GetPhysicalDeviceMemoryProperties =
        unsafe { l.instance_fn(instance, c"vkGetPhysicalDeviceMemoryProperties") }?;
    // SAFETY: plain integers; the driver fills them.
    let mut p: VkPhysicalDeviceMemoryProperties = unsafe { std::mem::zeroed() };
    // SAFETY: a live physical device and our struct.
    unsafe { get(phys, &mut p) };
    let types: Vec<(u32, u32)> = p.memory_types[..(p.memory_type_count as usize).min(32)]
        .iter()
        .map(|t| (t.property_flags, t.heap_index))
        .collect();
    let heaps: Vec<u64> = p.memory_heaps[..(p.memory_heap_count as usize).min(16)]
        .iter()
        .map(|h| h.size)
        .collect();
    pick_memory_type(&types, &heaps)
}

/// A logical device on `phys` with the external-memory extensions, and its functions.
fn open_device(
    l: &Loader,
    instance: VkInstance,
    phys: VkPhysicalDevice,
) -> Result<(VkDevice, Fns), OpenError> {
    let miss = |n: &str| OpenError::Device(format!("Vulkan has no {n}"));
    // SAFETY (both): the types are the functions'; the instance is live.
    let create: CreateDevice = unsafe { l.instance_fn(instance, c"vkCreateDevice") }
        .ok_or_else(|| miss("vkCreateDevice"))?;
    let gdpa: GetDeviceProcAddr = unsafe { l.instance_fn(instance, c"vkGetDeviceProcAddr") }
        .ok_or_else(|| miss("vkGetDeviceProcAddr"))?;
    let priority = 1.0f32;
    let queue = VkDeviceQueueCreateInfo {
        s_type: STYPE_DEVICE_QUEUE_CREATE_INFO,
        p_next: std::ptr::null(),
        flags: 0,
        queue_family_index: 0,
        queue_count: 1,
        p_queue_priorities: &priority,
    };
    let exts: [*const c_char; 2] = [
        c"VK_KHR_external_memory".as_ptr(),
        c"VK_KHR_external_memory_fd".as_ptr(),
    ];
    let info = VkDeviceCreateInfo {
        s_type: STYPE_DEVICE_CREATE_INFO,
        p_next: std::ptr::null(),
        flags: 0,
        queue_create_info_count: 1,
        p_queue_create_infos: &queue,
        enabled_layer_count: 0,
        pp_enabled_layer_names: std::ptr::null(),
        enabled_extension_count: exts.len() as u32,
        pp_enabled_extension_names: exts.as_ptr(),
        p_enabled_features: std::ptr::null(),
    };
    let mut device: VkDevice = std::ptr::null_mut();
    // SAFETY: valid create info whose pointers outlive the call.
    let r = unsafe { create(phys, &info, std::ptr::null(), &mut device) };
    if r != VK_SUCCESS {
        return Err(OpenError::Device(vk_err(
            "vkCreateDevice with VK_KHR_external_memory_fd",
            r,
        )));
    }
    // SAFETY (all): the types are the named functions'; the device is live.
    let destroy_device: Option<DestroyDevice> =
        unsafe { device_fn(gdpa, device, c"vkDestroyDevice") };
    let Some(destroy_device) = destroy_device else {
        return Err(miss("vkDestroyDevice"));
    };
    let fns = (|| {
        // SAFETY: as above.
        unsafe {
            Some(Fns {
                destroy_device,
                allocate_memory: device_fn(gdpa, device, c"vkAllocateMemory")?,
                free_memory: device_fn(gdpa, device, c"vkFreeMemory")?,
                map_memory: device_fn(gdpa, device, c"vkMapMemory")?,
                unmap_memory: device_fn(gdpa, device, c"vkUnmapMemory")?,
                get_memory_fd: device_fn(gdpa, device, c"vkGetMemoryFdKHR")?,
            })
        }
    })();
    match fns {
        Some(f) => Ok((device, f)),
        None => {
            // SAFETY: the device was created above and nothing uses it.
            unsafe { destroy_device(device, std::ptr::null()) };
            Err(miss("vkGetMemoryFdKHR or the memory functions"))
        }
    }
}

/// One allocation of GPU memory mapped for the CPU: `size` bytes at `host` for the CPU and
/// at `dev` for CUDA. Released in reverse order of its making when dropped.
pub struct GpuMapped {
    vk: Arc<Vkgdr>,
    mem: VkDeviceMemory,
    host: *mut u8,
    ext: sys::CUexternalMemory,
    dev: sys::CUdeviceptr,
    size: usize,
}

// SAFETY: owns its allocation exclusively; the handles are used only in Drop.
unsafe impl Send for GpuMapped {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for GpuMapped {}

impl GpuMapped {
    /// The CPU's address of the first byte.
    pub fn host(&self) -> *mut u8 {
        self.host
    }

    /// CUDA's address of the first byte.
    pub fn device(&self) -> sys::CUdeviceptr {
        self.dev
    }

    /// Bytes mapped (the request rounded up to 2 MiB).
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for GpuMapped {
    fn drop(&mut self) {
        if self.dev != 0 {
            unregister(self.host as usize);
        }
        let bound = self.vk.ctx.bind_to_thread().is_ok();
        // SAFETY: each handle is released once, in reverse order of its making, and only
        // if it was made; nothing reads the memory any more (the chunk owning it is gone).
        unsafe {
            if bound && self.dev != 0 {
                sys::cuMemFree_v2(self.dev);
            }
            if bound && !self.ext.is_null() {
                sys::cuDestroyExternalMemory(self.ext);
            }
            if !self.host.is_null() {
                (self.vk.fns.unmap_memory)(self.vk.device, self.mem);
            }
            (self.vk.fns.free_memory)(self.vk.device, self.mem, std::ptr::null());
        }
    }
}

/// A live GPU-mapped allocation: host range and device address.
struct Region {
    host: usize,
    len: usize,
    dev: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
}

static ANY: AtomicBool = AtomicBool::new(false);
static REGIONS: RwLock<Vec<Region>> = RwLock::new(Vec::new());

fn register(host: usize, len: usize, dev: sys::CUdeviceptr, ctx: &Arc<CudaContext>) {
    let mut r = REGIONS.write().unwrap_or_else(|e| e.into_inner());
    r.push(Region {
        host,
        len,
        dev,
        ctx: ctx.clone(),
    });
    ANY.store(true, Ordering::Release);
}

fn unregister(host: usize) {
    let mut r = REGIONS.write().unwrap_or_else(|e| e.into_inner());
    r.retain(|g| g.host != host);
    ANY.store(!r.is_empty(), Ordering::Release);
}

/// The device address of `bytes` and the context it belongs to, if they lie (whole) in
/// GPU-mapped chunk memory.
fn lookup(bytes: &[u8]) -> Option<(sys::CUdeviceptr, Arc<CudaContext>)> {
    if bytes.is_empty() || !ANY.load(Ordering::Acquire) {
        return None;
    }
    let p = bytes.as_ptr() as usize;
    let r = REGIONS.read().unwrap_or_else(|e| e.into_inner());
    r.iter()
        .find(|g| p >= g.host && p + bytes.len() <= g.host + g.len)
        .map(|g| (g.dev + (p - g.host) as u64, g.ctx.clone()))
}

/// CUDA's address of `bytes` when they lie in GPU-mapped chunk memory.
pub fn device_address(bytes: &[u8]) -> Option<sys::CUdeviceptr> {
    lookup(bytes).map(|(d, _)| d)
}

/// Makes the CPU's stores to GPU-mapped `bytes` (non-empty) land in device memory before
/// the GPU is told to read them. A fence drains this core's write-combining buffers, but a
/// store that has left the core is a posted PCIe write still on its way to the GPU, and a
/// copy or kernel queued next may read device memory before it arrives: CUDA orders only
/// BAR writes that are complete when the dependent call is made. Stores of other threads
/// were fenced by them before they handed the chunk over. One load from the mapping then
/// flushes them all: a PCIe read may not pass the posted writes queued before it on the
/// same path, so its completion comes back only after they have landed. The load is one
/// uncached round trip (about a microsecond) per chunk.
fn flush_posted_writes(bytes: &[u8]) {
    crate::mem::stream_fence();
    if let Some(last) = bytes.last() {
        // SAFETY: a valid reference into live mapped memory; the volatile load is the point.
        let _ = unsafe { std::ptr::read_volatile(last) };
    }
}

/// When `src` lies in GPU-mapped chunk memory: queues its copy into the start of `dst` on
/// `stream`, device to device, and returns true (`src` must then stay alive until the
/// stream has passed the copy, as for an asynchronous upload). False, doing nothing,
/// otherwise: the caller uploads from host memory as before.
pub fn copy_mapped_to_device<T>(
    stream: &CudaStream,
    src: &[u8],
    dst: &mut impl DevicePtrMut<T>,
) -> Result<bool, DriverError> {
    let Some(from) = device_address(src) else {
        return Ok(false);
    };
    if dst.num_bytes() < src.len() {
        return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
    }
    flush_posted_writes(src);
    let (to, _record) = dst.device_ptr_mut(stream);
    // SAFETY: both ranges are device memory of at least src.len() bytes; queued on stream.
    unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, src.len(), stream.cu_stream()) }.result()?;
    Ok(true)
}

/// Appends `src` to `dst`: from GPU-mapped chunk memory by a device-to-host copy (the CPU
/// loads only the one flushing byte from the uncached mapping), else by a plain copy.
pub fn read_chunk_bytes(dst: &mut Vec<u8>, src: &[u8]) {
    let at = dst.len();
    if let Some((from, ctx)) = lookup(src) {
        dst.resize(at + src.len(), 0);
        flush_posted_writes(src);
        let ok = ctx.bind_to_thread().is_ok()
            // SAFETY: `from` is src.len() bytes of device memory; dst has room for them.
            && unsafe { sys::cuMemcpyDtoH_v2(dst[at..].as_mut_ptr().cast(), from, src.len()) }
                == sys::CUresult::CUDA_SUCCESS;
        if ok {
            return;
        }
        dst.truncate(at);
    }
    dst.extend_from_slice(src);
}

#[cfg(test)]
mod tests;
