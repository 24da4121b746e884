// common/cpu_backend/static_shared.cpp — finds each kernel's static __shared__ variables in the symbol table.
//
// `__shared__ float tile[16][17];` inside a kernel is a function-local static here (thread_local in the default
// build): the compiler gives it a fixed address, so the backend cannot hand each block a fresh copy as it does for
// dynamic shared memory. It can find it, though: its symbol is the kernel's mangled name wrapped as
// _ZZ<kernel>E<name>, with its size, in the executable's symbol table. At a kernel's first launch the backend looks
// the kernel up there (reading /proc/self/exe's .symtab once per process), and from then on knows its static shared
// variables: their total counts against the launch limit, and every block finds them filled with 0xFF bytes (NaN
// as floats), as a block finds its dynamic shared memory. A stripped executable has no symbol table: its kernels
// then run without either (nothing else changes). Shared variables declared in a __device__ helper rather than in
// the kernel itself are not found.
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/cpu_backend/internal.h"

namespace cpu_backend {
namespace {

// The executable's symbol table, mapped read-only for the life of the process.
struct SymbolTable {
    const Elf64_Sym* symbols = nullptr;
    size_t count = 0;
    const char* names = nullptr;
    const Elf64_Shdr* sections = nullptr;
    size_t section_count = 0;
    uintptr_t load_bias = 0;         // run-time address = link-time address + load_bias (position-independent code)
    uint64_t thread_idx_offset = 0;  // threadIdx's offset in the TLS block: locates the block at run time
    bool has_thread_idx = false;

    bool writable(const Elf64_Sym& s) const {
        return s.st_shndx != SHN_UNDEF && s.st_shndx < section_count && (sections[s.st_shndx].sh_flags & SHF_WRITE);
    }
};

int find_executable_bias(dl_phdr_info* info, size_t, void* bias) {
    *static_cast<uintptr_t*>(bias) = info->dlpi_addr;  // the first object listed is the executable
    return 1;
}

SymbolTable load_symbol_table() {
    SymbolTable table;
    const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return table;
    struct stat info {};
    void* file = MAP_FAILED;
    if (fstat(fd, &info) == 0 && size_t(info.st_size) >= sizeof(Elf64_Ehdr))
        file = mmap(nullptr, size_t(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (file == MAP_FAILED) return table;
    const auto* bytes = static_cast<const unsigned char*>(file);
    const auto* header = static_cast<const Elf64_Ehdr*>(file);
    if (std::memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 || header->e_ident[EI_CLASS] != ELFCLASS64 ||
        header->e_shentsize != sizeof(Elf64_Shdr) ||
        header->e_shoff + size_t(header->e_shnum) * sizeof(Elf64_Shdr) > size_t(info.st_size))
        return table;
    table.sections = reinterpret_cast<const Elf64_Shdr*>(bytes + header->e_shoff);
    table.section_count = header->e_shnum;
    for (size_t i = 0; i < table.section_count; ++i) {
        const Elf64_Shdr& s = table.sections[i];
        if (s.sh_type != SHT_SYMTAB || s.sh_link >= table.section_count) continue;
        table.symbols = reinterpret_cast<const Elf64_Sym*>(bytes + s.sh_offset);
        table.count = s.sh_size / sizeof(Elf64_Sym);
        table.names = reinterpret_cast<const char*>(bytes + table.sections[s.sh_link].sh_offset);
    }
    dl_iterate_phdr(find_executable_bias, &table.load_bias);
    for (size_t i = 0; i < table.count; ++i) {
        const Elf64_Sym& s = table.symbols[i];
        if (ELF64_ST_TYPE(s.st_info) == STT_TLS && std::strcmp(table.names + s.st_name, "threadIdx") == 0) {
            table.thread_idx_offset = s.st_value;
            table.has_thread_idx = true;
        }
    }
    return table;
}

const SymbolTable& symbol_table() {
    static const SymbolTable table = load_symbol_table();
    return table;
}

// What the build makes of `__shared__` (runtime.h): thread_local, or a plain static.
#if defined(CUDA_TEACH_SANITIZE) || defined(CUDA_TEACH_RACECHECK)
constexpr unsigned char kSharedSymbolType = STT_OBJECT;
#else
constexpr unsigned char kSharedSymbolType = STT_TLS;
#endif

StaticShared find_static_shared(const void* kernel_address) {
    StaticShared found;
    const SymbolTable& table = symbol_table();
    const uint64_t link_address = reinterpret_cast<uintptr_t>(kernel_address) - table.load_bias;
    std::string_view kernel_name;
    size_t kernel_symbol = 0;
    // Prefer the plain name to an alias at the same address (name.localalias, name.lto_priv.0, ...).
    for (size_t i = 0; i < table.count; ++i) {
        const Elf64_Sym& s = table.symbols[i];
        if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_value != link_address || s.st_name == 0) continue;
        const std::string_view name = table.names + s.st_name;
        if (kernel_name.empty() ||
            (kernel_name.find('.') != std::string_view::npos && name.find('.') == std::string_view::npos)) {
            kernel_name = name;
            kernel_symbol = i;
        }
    }
    kernel_name = kernel_name.substr(0, kernel_name.find('.'));
    if (kernel_name.empty()) return found;
    // A kernel of internal linkage (in an anonymous namespace, or any kernel of the sanitizer build) has the same
    // mangled name in every file that defines it, each copy with its own statics: only those listed with it count,
    // between the FILE symbols around it (the linker lists each object file's local symbols together).
    size_t first = 0, end = table.count;
    if (ELF64_ST_BIND(table.symbols[kernel_symbol].st_info) == STB_LOCAL) {
        for (size_t i = kernel_symbol; i-- > 0;) {
            if (ELF64_ST_TYPE(table.symbols[i].st_info) == STT_FILE) {
                first = i;
                break;
            }
        }
        for (size_t i = kernel_symbol + 1; i < table.count; ++i) {
            const unsigned char info = table.symbols[i].st_info;
            if (ELF64_ST_TYPE(info) == STT_FILE || ELF64_ST_BIND(info) != STB_LOCAL) {
                end = i;
                break;
            }
        }
    }
    found.kernel_name = std::string(kernel_name);
    // A local static's name: _ZZ <the function's encoding> E <its own name>; an extern "C" function's encoding is
    // its length and name.
    const std::string prefix = kernel_name.starts_with("_Z")
                                   ? "_ZZ" + std::string(kernel_name.substr(2)) + "E"
                                   : "_ZZ" + std::to_string(kernel_name.size()) + std::string(kernel_name) + "E";
    for (size_t i = first; i < end; ++i) {
        const Elf64_Sym& s = table.symbols[i];
        if (ELF64_ST_TYPE(s.st_info) != kSharedSymbolType || s.st_size == 0 || !table.writable(s)) continue;
        if (std::strncmp(table.names + s.st_name, prefix.c_str(), prefix.size()) != 0) continue;
        found.variables.push_back({s.st_value, static_cast<size_t>(s.st_size)});
        found.bytes += static_cast<size_t>(s.st_size);
    }
    return found;
}

std::mutex cache_mutex;
std::unordered_map<const void*, StaticShared>& cache() {
    static auto& map = *new std::unordered_map<const void*, StaticShared>;  // never destroyed: used until exit
    return map;
}

#if defined(CUDA_TEACH_RACECHECK)
// The race build's `__shared__` starts a page of its own (runtime.h), and no other local static does (they are
// packed, at no more than their own alignment). A page-aligned local static of a function that has no symbol (so
// not a kernel: a kernel's address is taken to launch it) is then the `__shared__` of an inlined __device__ helper.
std::vector<StaticSharedVariable> find_helper_shared() {
    const SymbolTable& table = symbol_table();
    std::unordered_set<std::string_view> owners;  // "_ZZ<function>E" for every function with a symbol
    std::vector<std::string> prefixes;
    for (size_t i = 0; i < table.count; ++i) {
        const Elf64_Sym& s = table.symbols[i];
        const std::string_view name = table.names + s.st_name;
        if (ELF64_ST_TYPE(s.st_info) == STT_FUNC && name.starts_with("_Z"))
            prefixes.push_back("_ZZ" + std::string(name.substr(2)) + "E");
    }
    owners.insert(prefixes.begin(), prefixes.end());
    std::vector<StaticSharedVariable> found;
    for (size_t i = 0; i < table.count; ++i) {
        const Elf64_Sym& s = table.symbols[i];
        const std::string_view name = table.names + s.st_name;
        if (ELF64_ST_TYPE(s.st_info) != STT_OBJECT || s.st_size == 0 || !table.writable(s) ||
            (s.st_value + table.load_bias) % 4096 != 0 || !name.starts_with("_ZZ"))
            continue;
        bool owned = false;
        for (size_t length = 4; length < name.size() && !owned; ++length)
            owned = name[length - 1] == 'E' && owners.contains(name.substr(0, length));
        if (!owned) found.push_back({s.st_value, static_cast<size_t>(s.st_size)});
    }
    return found;
}
#endif

}  // namespace

#if defined(CUDA_TEACH_RACECHECK)
const std::vector<StaticSharedVariable>& helper_shared_variables() {
    static const std::vector<StaticSharedVariable> found = find_helper_shared();
    return found;
}
#endif

const StaticShared& static_shared_of(const void* kernel_address) {
    std::lock_guard lock(cache_mutex);
    auto it = cache().find(kernel_address);
    if (it == cache().end()) it = cache().emplace(kernel_address, find_static_shared(kernel_address)).first;
    return it->second;  // elements of an unordered_map stay where they are
}

unsigned char* static_shared_address(const StaticSharedVariable& variable) {
    const SymbolTable& table = symbol_table();
    if constexpr (kSharedSymbolType == STT_TLS) {
        // This thread's TLS block, located through threadIdx (defined in this executable, as the variable is).
        if (!table.has_thread_idx) return nullptr;
        unsigned char* block = reinterpret_cast<unsigned char*>(&threadIdx) - table.thread_idx_offset;
        return block + variable.address;
    } else {
        return reinterpret_cast<unsigned char*>(variable.address + table.load_bias);
    }
}

}  // namespace cpu_backend
