package core

import "unsafe"

func unsafeSizeofBody() uintptr { return unsafe.Sizeof(Body{}) }
