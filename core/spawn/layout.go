package spawn

/*
#include "wire.h"
*/
import "C"

import "unsafe"

// wireLayout is the layout of wire.h's structs as cgo compiled them (the engine's
// side): "struct" -> size and "struct.field" -> offset. wire_test.go checks that
// sandtrap-init's compiler, with its own flags, lays them out the same.
func wireLayout() map[string]uintptr {
	var cfg C.struct_st_config
	var lt C.struct_st_landlock_table
	var lr C.struct_st_landlock_rule
	var rq C.struct_st_request
	var rp C.struct_st_reply
	var st C.struct_st_status
	var cw C.struct_st_cow
	var cr C.struct_st_cow_rule
	return map[string]uintptr{
		"st_cow": unsafe.Sizeof(cw), "st_cow.size": unsafe.Offsetof(cw.size), "st_cow.flags": unsafe.Offsetof(cw.flags),
		"st_cow.nrules": unsafe.Offsetof(cw.nrules), "st_cow.strlen": unsafe.Offsetof(cw.strlen),
		"st_cow_rule": unsafe.Sizeof(cr), "st_cow_rule.rights": unsafe.Offsetof(cr.rights), "st_cow_rule.name": unsafe.Offsetof(cr.name),
		"st_config": unsafe.Sizeof(cfg), "st_config.magic": unsafe.Offsetof(cfg.magic), "st_config.flags": unsafe.Offsetof(cfg.flags),
		"st_config.as_limit": unsafe.Offsetof(cfg.as_limit), "st_config.cookie": unsafe.Offsetof(cfg.cookie),
		"st_config.bpf_len": unsafe.Offsetof(cfg.bpf_len), "st_config.uid": unsafe.Offsetof(cfg.uid), "st_config.gid": unsafe.Offsetof(cfg.gid),
		"st_config.test_fail": unsafe.Offsetof(cfg.test_fail),
		"st_landlock_table":   unsafe.Sizeof(lt), "st_landlock_table.handled_fs": unsafe.Offsetof(lt.handled_fs),
		"st_landlock_table.handled_net": unsafe.Offsetof(lt.handled_net), "st_landlock_table.scoped": unsafe.Offsetof(lt.scoped),
		"st_landlock_table.attr_size": unsafe.Offsetof(lt.attr_size), "st_landlock_table.proc_rights": unsafe.Offsetof(lt.proc_rights),
		"st_landlock_table.dev_rights": unsafe.Offsetof(lt.dev_rights), "st_landlock_table.shm_rights": unsafe.Offsetof(lt.shm_rights),
		"st_config.shm_size":       unsafe.Offsetof(cfg.shm_size),
		"st_landlock_table.npaths": unsafe.Offsetof(lt.npaths), "st_landlock_table.nports": unsafe.Offsetof(lt.nports),
		"st_landlock_rule": unsafe.Sizeof(lr), "st_landlock_rule.rights": unsafe.Offsetof(lr.rights),
		"st_landlock_rule.port": unsafe.Offsetof(lr.port), "st_landlock_rule.fd": unsafe.Offsetof(lr.fd),
		"st_request": unsafe.Sizeof(rq), "st_request.magic": unsafe.Offsetof(rq.magic), "st_request.argc": unsafe.Offsetof(rq.argc),
		"st_request.envc": unsafe.Offsetof(rq.envc), "st_request.cpu_secs": unsafe.Offsetof(rq.cpu_secs), "st_request.nofile": unsafe.Offsetof(rq.nofile), "st_request.flags": unsafe.Offsetof(rq.flags), "st_request.nextra": unsafe.Offsetof(rq.nextra),
		"st_reply": unsafe.Sizeof(rp), "st_reply.pid": unsafe.Offsetof(rp.pid), "st_reply.err": unsafe.Offsetof(rp.err), "st_reply.step": unsafe.Offsetof(rp.step),
		"st_status": unsafe.Sizeof(st), "st_status.kind": unsafe.Offsetof(st.kind), "st_status.value": unsafe.Offsetof(st.value),
		"st_status.a": unsafe.Offsetof(st.a), "st_status.b": unsafe.Offsetof(st.b), "st_status.c": unsafe.Offsetof(st.c),
	}
}
