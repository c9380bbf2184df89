package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/profile"
)

// stgo_profile answers a profile request (include/sandtrap.h, sandtrap_profile):
// it converts, core/profile decides.
//
//export stgo_profile
func stgo_profile(req *C.uint8_t, n C.size_t, out **C.uint8_t, outLen *C.size_t) C.int {
	m, err := engine.DecodeMap(goBytes(req, n), "profile request")
	var resp map[string]any
	if err == nil {
		resp, err = profile.Handle(m)
	}
	if err == nil {
		outBuf(engine.Encode(resp), out, outLen)
		return stOK
	}
	kind, st := engine.KindInternal, C.int(stInternal)
	var probs []profile.Problem
	var pe *profile.Error
	var re *profile.RequestError
	var nf *profile.NotFoundError
	var ee *engine.Error
	switch {
	case errors.As(err, &pe):
		kind, st, probs = engine.KindInvalidPolicy, stInvalidPolicy, pe.Problems
	case errors.As(err, &re):
		kind, st = engine.KindInvalidRequest, stInvalidRequest
	case errors.As(err, &nf):
		kind, st = engine.KindNotFound, stNotFound
	case errors.As(err, &ee):
		kind, st = ee.Kind, status(ee.Kind)
	}
	e := map[string]any{"kind": kind, "message": err.Error()}
	if probs != nil {
		e["problems"] = probs
	}
	outBuf(engine.Encode(map[string]any{"error": e}), out, outLen)
	return st
}
