/*
 * The Python call site of a communicator's creation: the frames of the calling
 * thread, read through the CPython C API found at run time (the shim links no
 * Python).  Only a thread that already has a Python thread state is asked
 * (NCCL's own threads never are), and no shim lock is held while the
 * interpreter lock is taken (callers guarantee it: see evidence_gather).
 */
#define _GNU_SOURCE
#include "python_callsite.h"

#include "loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct _object PyObject;

struct py_api {
    int (*IsInitialized)(void);
    int (*IsFinalizing)(void);
    void *(*GetThisThreadState)(void);
    int (*GILEnsure)(void);
    void (*GILRelease)(int);
    PyObject *(*ThreadStateGetFrame)(void *);
    PyObject *(*FrameGetCode)(PyObject *);
    PyObject *(*FrameGetBack)(PyObject *);
    int (*FrameGetLineNumber)(PyObject *);
    PyObject *(*GetAttrString)(PyObject *, const char *);
    const char *(*UnicodeAsUTF8)(PyObject *);
    void (*DecRef)(PyObject *);
    void (*ErrFetch)(PyObject **, PyObject **, PyObject **);
    void (*ErrRestore)(PyObject *, PyObject *, PyObject *);
};

/* Looked up on every creation: Python may be loaded after the shim (embedded
 * interpreters), and creations are rare.  Returns 0 unless all are present. */
static int py_api_load(struct py_api *a)
{
    dlsym_fn_t real = shim_real_dlsym();
#define LOAD(field, sym) (a->field = (__typeof__(a->field))real(RTLD_DEFAULT, sym))
    if (!LOAD(IsInitialized, "Py_IsInitialized") || !LOAD(GetThisThreadState, "PyGILState_GetThisThreadState") ||
        !LOAD(GILEnsure, "PyGILState_Ensure") || !LOAD(GILRelease, "PyGILState_Release") ||
        !LOAD(ThreadStateGetFrame, "PyThreadState_GetFrame") || !LOAD(FrameGetCode, "PyFrame_GetCode") ||
        !LOAD(FrameGetBack, "PyFrame_GetBack") || !LOAD(FrameGetLineNumber, "PyFrame_GetLineNumber") ||
        !LOAD(GetAttrString, "PyObject_GetAttrString") || !LOAD(UnicodeAsUTF8, "PyUnicode_AsUTF8") ||
        !LOAD(DecRef, "Py_DecRef") || !LOAD(ErrFetch, "PyErr_Fetch") || !LOAD(ErrRestore, "PyErr_Restore"))
        return 0;
    /* Taking the interpreter lock while the interpreter shuts down can hang or
     * end the thread: never try then.  Py_IsFinalizing is public from 3.13. */
    if (!LOAD(IsFinalizing, "Py_IsFinalizing") && !LOAD(IsFinalizing, "_Py_IsFinalizing"))
        return 0;
#undef LOAD
    return 1;
}

static const char *code_attr(const struct py_api *a, PyObject *code, const char *name, PyObject **hold)
{
    *hold = a->GetAttrString(code, name);
    const char *s = *hold ? a->UnicodeAsUTF8(*hold) : NULL;
    return s ? s : "?";
}

int python_callsite(char frames[][EVIDENCE_FRAME_LEN], int max)
{
    struct py_api a;
    if (!py_api_load(&a) || !a.IsInitialized() || a.IsFinalizing() || !a.GetThisThreadState())
        return 0;
    int gil = a.GILEnsure();
    PyObject *et, *ev, *etb;
    a.ErrFetch(&et, &ev, &etb); /* leave the thread's exception state as we found it */
    int n = 0;
    PyObject *frame = a.ThreadStateGetFrame(a.GetThisThreadState());
    while (frame && n < max) {
        PyObject *code = a.FrameGetCode(frame);
        if (code) {
            PyObject *fh = NULL, *nh = NULL;
            const char *file = code_attr(&a, code, "co_filename", &fh);
            const char *func = code_attr(&a, code, "co_name", &nh);
            snprintf(frames[n++], EVIDENCE_FRAME_LEN, "%s:%d %s", file, a.FrameGetLineNumber(frame), func);
            if (fh)
                a.DecRef(fh);
            if (nh)
                a.DecRef(nh);
            a.DecRef(code);
        }
        PyObject *back = a.FrameGetBack(frame);
        a.DecRef(frame);
        frame = back;
    }
    if (frame)
        a.DecRef(frame);
    a.ErrRestore(et, ev, etb);
    a.GILRelease(gil);
    return n;
}
