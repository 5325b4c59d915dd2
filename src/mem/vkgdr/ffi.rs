//! The few Vulkan types and entry points `--use-vkgdr` needs, written from the Vulkan
//! specification (vulkan_core.h) rather than taken from a crate: libvulkan.so.1 is loaded
//! at run time with `dlopen`, `vkGetInstanceProcAddr` is the one symbol looked up in it, and
//! every other function comes through it (or through `vkGetDeviceProcAddr`).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void, CStr};

/// `VkResult` (0 is `VK_SUCCESS`; errors are negative).
pub(super) type VkResult = i32;
/// Dispatchable handles are pointers.
pub(super) type VkInstance = *mut c_void;
/// A physical device (dispatchable).
pub(super) type VkPhysicalDevice = *mut c_void;
/// A logical device (dispatchable).
pub(super) type VkDevice = *mut c_void;
/// Non-dispatchable handles are 64-bit on every platform.
pub(super) type VkDeviceMemory = u64;
/// What `vkGet*ProcAddr` return.
pub(super) type PFN_vkVoidFunction = Option<unsafe extern "C" fn()>;

pub(super) const VK_SUCCESS: VkResult = 0;
pub(super) const VK_INCOMPLETE: VkResult = 5;
/// `VK_MAKE_API_VERSION(0, 1, 1, 0)`.
pub(super) const VK_API_VERSION_1_1: u32 = (1 << 22) | (1 << 12);
pub(super) const VK_WHOLE_SIZE: u64 = !0;

pub(super) const STYPE_APPLICATION_INFO: u32 = 0;
pub(super) const STYPE_INSTANCE_CREATE_INFO: u32 = 1;
pub(super) const STYPE_DEVICE_QUEUE_CREATE_INFO: u32 = 2;
pub(super) const STYPE_DEVICE_CREATE_INFO: u32 = 3;
pub(super) const STYPE_MEMORY_ALLOCATE_INFO: u32 = 5;
pub(super) const STYPE_PHYSICAL_DEVICE_PROPERTIES_2: u32 = 1_000_059_001;
pub(super) const STYPE_PHYSICAL_DEVICE_ID_PROPERTIES: u32 = 1_000_071_004;
pub(super) const STYPE_EXPORT_MEMORY_ALLOCATE_INFO: u32 = 1_000_072_002;
pub(super) const STYPE_MEMORY_GET_FD_INFO_KHR: u32 = 1_000_074_002;

/// `VK_MEMORY_PROPERTY_*_BIT`.
pub(super) const MEMORY_DEVICE_LOCAL: u32 = 0x1;
pub(super) const MEMORY_HOST_VISIBLE: u32 = 0x2;
pub(super) const MEMORY_HOST_COHERENT: u32 = 0x4;
/// `VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT`.
pub(super) const HANDLE_TYPE_OPAQUE_FD: u32 = 0x1;

#[repr(C)]
pub(super) struct VkApplicationInfo {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) p_application_name: *const c_char,
    pub(super) application_version: u32,
    pub(super) p_engine_name: *const c_char,
    pub(super) engine_version: u32,
    pub(super) api_version: u32,
}

#[repr(C)]
pub(super) struct VkInstanceCreateInfo {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) flags: u32,
    pub(super) p_application_info: *const VkApplicationInfo,
    pub(super) enabled_layer_count: u32,
    pub(super) pp_enabled_layer_names: *const *const c_char,
    pub(super) enabled_extension_count: u32,
    pub(super) pp_enabled_extension_names: *const *const c_char,
}

/// `VkPhysicalDeviceProperties2` with the core properties (824 bytes on 64-bit hosts) held
/// as opaque bytes, over-sized: only `deviceName` (offset 20, 256 bytes) is read.
#[repr(C)]
pub(super) struct VkPhysicalDeviceProperties2 {
    pub(super) s_type: u32,
    pub(super) p_next: *mut c_void,
    pub(super) properties: [u64; 128],
}

impl VkPhysicalDeviceProperties2 {
    /// `deviceName` of the core properties.
    pub(super) fn device_name(&self) -> String {
        // SAFETY: the properties are plain bytes of our own array; 20 + 256 ≤ 1024.
        let bytes = unsafe {
            std::slice::from_raw_parts((self.properties.as_ptr() as *const u8).add(20), 256)
        };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }
}

#[repr(C)]
pub(super) struct VkPhysicalDeviceIDProperties {
    pub(super) s_type: u32,
    pub(super) p_next: *mut c_void,
    pub(super) device_uuid: [u8; 16],
    pub(super) driver_uuid: [u8; 16],
    pub(super) device_luid: [u8; 8],
    pub(super) device_node_mask: u32,
    pub(super) device_luid_valid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct VkMemoryType {
    pub(super) property_flags: u32,
    pub(super) heap_index: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct VkMemoryHeap {
    pub(super) size: u64,
    pub(super) flags: u32,
}

#[repr(C)]
pub(super) struct VkPhysicalDeviceMemoryProperties {
    pub(super) memory_type_count: u32,
    pub(super) memory_types: [VkMemoryType; 32],
    pub(super) memory_heap_count: u32,
    pub(super) memory_heaps: [VkMemoryHeap; 16],
}

#[repr(C)]
pub(super) struct VkDeviceQueueCreateInfo {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) flags: u32,
    pub(super) queue_family_index: u32,
    pub(super) queue_count: u32,
    pub(super) p_queue_priorities: *const f32,
}

#[repr(C)]
pub(super) struct VkDeviceCreateInfo {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) flags: u32,
    pub(super) queue_create_info_count: u32,
    pub(super) p_queue_create_infos: *const VkDeviceQueueCreateInfo,
    pub(super) enabled_layer_count: u32,
    pub(super) pp_enabled_layer_names: *const *const c_char,
    pub(super) enabled_extension_count: u32,
    pub(super) pp_enabled_extension_names: *const *const c_char,
    pub(super) p_enabled_features: *const c_void,
}

#[repr(C)]
pub(super) struct VkExportMemoryAllocateInfo {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) handle_types: u32,
}

#[repr(C)]
pub(super) struct VkMemoryAllocateInfo {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) allocation_size: u64,
    pub(super) memory_type_index: u32,
}

#[repr(C)]
pub(super) struct VkMemoryGetFdInfoKHR {
    pub(super) s_type: u32,
    pub(super) p_next: *const c_void,
    pub(super) memory: VkDeviceMemory,
    pub(super) handle_type: u32,
}

pub(super) type GetInstanceProcAddr =
    unsafe extern "C" fn(VkInstance, *const c_char) -> PFN_vkVoidFunction;
pub(super) type GetDeviceProcAddr =
    unsafe extern "C" fn(VkDevice, *const c_char) -> PFN_vkVoidFunction;
pub(super) type CreateInstance =
    unsafe extern "C" fn(*const VkInstanceCreateInfo, *const c_void, *mut VkInstance) -> VkResult;
pub(super) type DestroyInstance = unsafe extern "C" fn(VkInstance, *const c_void);
pub(super) type EnumeratePhysicalDevices =
    unsafe extern "C" fn(VkInstance, *mut u32, *mut VkPhysicalDevice) -> VkResult;
pub(super) type GetPhysicalDeviceProperties2 =
    unsafe extern "C" fn(VkPhysicalDevice, *mut VkPhysicalDeviceProperties2);
pub(super) type GetPhysicalDeviceMemoryProperties =
    unsafe extern "C" fn(VkPhysicalDevice, *mut VkPhysicalDeviceMemoryProperties);
pub(super) type CreateDevice = unsafe extern "C" fn(
    VkPhysicalDevice,
    *const VkDeviceCreateInfo,
    *const c_void,
    *mut VkDevice,
) -> VkResult;
pub(super) type DestroyDevice = unsafe extern "C" fn(VkDevice, *const c_void);
pub(super) type AllocateMemory = unsafe extern "C" fn(
    VkDevice,
    *const VkMemoryAllocateInfo,
    *const c_void,
    *mut VkDeviceMemory,
) -> VkResult;
pub(super) type FreeMemory = unsafe extern "C" fn(VkDevice, VkDeviceMemory, *const c_void);
pub(super) type MapMemory =
    unsafe extern "C" fn(VkDevice, VkDeviceMemory, u64, u64, u32, *mut *mut c_void) -> VkResult;
pub(super) type UnmapMemory = unsafe extern "C" fn(VkDevice, VkDeviceMemory);
pub(super) type GetMemoryFdKHR =
    unsafe extern "C" fn(VkDevice, *const VkMemoryGetFdInfoKHR, *mut c_int) -> VkResult;

/// libvulkan.so.1, loaded once per process and never unloaded.
#[derive(Clone, Copy)]
pub(super) struct Loader {
    get_instance_proc_addr: GetInstanceProcAddr,
}

impl Loader {
    /// Loads the Vulkan loader library; the error says why it is not there.
    pub(super) fn load() -> Result<Loader, String> {
        static L: std::sync::OnceLock<Result<Loader, String>> = std::sync::OnceLock::new();
        L.get_or_init(|| {
            // SAFETY: dlopen of a library by name; the handle is kept for the process.
            let h = unsafe { libc::dlopen(c"libvulkan.so.1".as_ptr(), libc::RTLD_NOW) };
            if h.is_null() {
                return Err(format!("libvulkan.so.1 cannot be loaded ({})", dl_error()));
            }
            // SAFETY: looking up a symbol in the handle just opened.
            let f = unsafe { libc::dlsym(h, c"vkGetInstanceProcAddr".as_ptr()) };
            if f.is_null() {
                return Err("libvulkan.so.1 has no vkGetInstanceProcAddr".into());
            }
            Ok(Loader {
                // SAFETY: the symbol is vkGetInstanceProcAddr, of this signature.
                get_instance_proc_addr: unsafe {
                    std::mem::transmute::<*mut c_void, GetInstanceProcAddr>(f)
                },
            })
        })
        .clone()
    }

    /// `name` through `vkGetInstanceProcAddr(instance, name)` (null instance: global
    /// functions), as the function type `F`.
    ///
    /// # Safety
    /// `F` must be the function pointer type of `name`; `instance` null or live.
    pub(super) unsafe fn instance_fn<F: Copy>(
        &self,
        instance: VkInstance,
        name: &CStr,
    ) -> Option<F> {
        cast((self.get_instance_proc_addr)(instance, name.as_ptr()))
    }
}

/// `name` through `vkGetDeviceProcAddr`, as the function type `F`.
///
/// # Safety
/// `F` must be the function pointer type of `name`; `device` live.
pub(super) unsafe fn device_fn<F: Copy>(
    gdpa: GetDeviceProcAddr,
    device: VkDevice,
    name: &CStr,
) -> Option<F> {
    cast(gdpa(device, name.as_ptr()))
}

/// A looked-up function as its real type.
///
/// # Safety
/// `F` must be a function pointer type matching the function.
unsafe fn cast<F: Copy>(f: PFN_vkVoidFunction) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<unsafe extern "C" fn()>()) };
    f.map(|f| std::mem::transmute_copy::<unsafe extern "C" fn(), F>(&f))
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a C string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated by dlerror.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}
